"""Relation chains of shortest paths, enumerated over relation sequences, not entity paths.

The labelled shortest-path edges of one source form a layered DAG. The number of entity
paths through it can explode (every CVT node, every parallel relation multiplies them),
but GSR only needs the distinct relation sequences. So the walk keeps, per layer, the set
of ``(node, relation prefix)`` states: two paths that reach the same node with the same
relations merge. A cap bounds the work on pathological graphs: when a layer holds more
than ``max_chains`` distinct prefixes, only the ``max_chains`` smallest (by relation id)
go on, and no more than ``max_chains`` chains are returned. Chains come out shortest first,
then in relation-id order, so the result is deterministic.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

Chain = tuple[int, ...]


def walk_chains(
    source: int,
    steps: Mapping[int, Sequence[tuple[int, int]]],
    targets: set[int],
    max_chains: int,
) -> tuple[list[Chain], bool]:
    """Distinct relation chains of walks from ``source`` along ``steps`` that end at a target.

    ``steps[node]`` lists ``(relation, next node)``; it must be a layered DAG in which every
    node lies on a walk to a target (true for the labelled shortest-path edges of one
    source). Returns the chains and whether the cap cut anything off.
    """
    if max_chains < 1:
        raise ValueError(f"max_chains must be >= 1, got {max_chains}")
    found: list[Chain] = []
    capped = False
    frontier: dict[int, set[Chain]] = {source: {()}}
    while frontier and len(found) < max_chains:
        nxt: dict[int, set[Chain]] = defaultdict(set)
        for node, prefixes in frontier.items():
            for rel, far in steps.get(node, ()):
                nxt[far].update(p + (rel,) for p in prefixes)
        found.extend(sorted(set().union(*(ps for node, ps in nxt.items() if node in targets))))
        frontier = {node: ps for node, ps in nxt.items() if node in steps}
        prefixes = set().union(*frontier.values()) if frontier else set()
        if len(prefixes) > max_chains:
            keep = set(sorted(prefixes)[:max_chains])
            frontier = {n: ps & keep for n, ps in frontier.items() if ps & keep}
            capped = True
    # a state left over always extends to a (longer, hence new) chain
    return found[:max_chains], capped or len(found) > max_chains or bool(frontier)


def merge_chains(groups: Iterable[Iterable[Chain]], max_chains: int) -> tuple[list[Chain], bool]:
    """Distinct chains of several walks, shortest first then by relation ids, capped.

    Returns the chains and whether the cap cut anything off.
    """
    merged = sorted(set().union(*map(set, groups)), key=lambda c: (len(c), c))
    return merged[:max_chains], len(merged) > max_chains
