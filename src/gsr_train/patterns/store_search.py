"""Top-k pattern matching on the whole-KG store, exactly as on one question graph.

A pattern's candidates come from the whole KG (a known node's nearest entities of all the store's,
a known relation's nearest relations of all), not from a graph cut beforehand. The search itself is
the per-question one (`gsr_train.patterns.search.topk_matches`), run on the only part of the
store a match can lie in: a match maps the *anchor* (the pattern node with the fewest candidates) to
one of its candidates, and every other pattern node within the anchor's eccentricity ``h`` in the
pattern, along edges whose relation is a candidate of some pattern edge. So the region is the
``h``-hop neighbourhood of the anchor's candidates over those relations (edges among the last hop's
nodes included; `gsr_train.kg.store_walk.StoreWalker.region`), and the top k found there are
the top k of the whole store. A region past the walker's edge budget is searched as cut and counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gsr_train.kg.store import KGStore
from gsr_train.kg.store_walk import StoreWalker
from gsr_train.patterns.pattern import Pattern
from gsr_train.patterns.retrieve import Subgraph, merge_subgraphs
from gsr_train.patterns.search import LocalGraph, SearchStats, topk_matches


@dataclass
class StoreCosts:
    """One pattern's costs over the whole store: per node ``(entity ids, costs)`` or ``None`` (UNKNOWN:
    any entity at 0); per edge a cost per store relation (``inf``: not a candidate)."""

    nodes: list[tuple[np.ndarray, np.ndarray] | None]
    relations: list[np.ndarray]


StoreCostFn = Callable[[Pattern], StoreCosts]


@dataclass
class StorePatternRun:
    """Subgraphs per question (``edges``: store edge ids) and what the search cost."""

    subgraphs: list[list[Subgraph]]
    patterns: list[list[Pattern]]
    seconds: list[float] = field(default_factory=list)
    region_edges: list[int] = field(default_factory=list)  # per pattern searched
    stats: SearchStats = field(default_factory=SearchStats)
    no_pattern: int = 0
    no_anchor: int = 0  # patterns without a known node (they would match the whole KG)
    no_match: int = 0
    truncated_regions: int = 0
    truncated_searches: int = 0

    def summary(self) -> dict:
        n = len(self.seconds)
        return {
            "questions": n,
            "no_pattern": self.no_pattern,
            "no_anchor": self.no_anchor,
            "no_match": self.no_match,
            "truncated_regions": self.truncated_regions,
            "truncated_searches": self.truncated_searches,
            "ms_per_question": round(1000 * sum(self.seconds) / max(n, 1), 3),
            "median_region_edges": int(np.median(self.region_edges)) if self.region_edges else 0,
            "mean_triples": round(sum(len({e for g in s for e in g.edges}) for s in self.subgraphs) / max(n, 1), 2),
        }


def eccentricity(pattern: Pattern, node: int) -> int:
    """Hops from ``node`` to the farthest pattern node (edges either way)."""
    adj: dict[int, set[int]] = {i: set() for i in range(len(pattern.nodes))}
    for e in pattern.edges:
        adj[e.head].add(e.tail)
        adj[e.tail].add(e.head)
    dist, frontier = {node: 0}, [node]
    while frontier:
        nxt = []
        for u in frontier:
            for v in adj[u] - dist.keys():
                dist[v] = dist[u] + 1
                nxt.append(v)
        frontier = nxt
    return max(dist.values())


class StorePatternSearch:
    """Searches patterns on one store (see the module docstring)."""

    def __init__(
        self, store: KGStore, cost_fn: StoreCostFn, k: int, max_region: int = 200_000, max_partial: int | None = None
    ) -> None:
        self.store, self.cost_fn, self.k, self.max_partial = store, cost_fn, int(k), max_partial
        self.walker = StoreWalker(store, max_region)

    def _match(self, pattern: Pattern, run: StorePatternRun) -> list[Subgraph] | None:
        """The pattern's top k on the store, as store edge ids; ``None`` when it has no anchor."""
        costs = self.cost_fn(pattern)
        known = [i for i, c in enumerate(costs.nodes) if c is not None]
        if not known:
            return None
        anchor = min(known, key=lambda i: (costs.nodes[i][0].size, i))  # type: ignore[index]
        rel_ok = np.zeros(len(self.store.relations), dtype=np.uint8)
        for rc in costs.relations:
            rel_ok |= np.isfinite(rc)
        seeds = costs.nodes[anchor][0]  # type: ignore[index]
        region, cut = self.walker.region(seeds, eccentricity(pattern, anchor), rel_ok)
        run.region_edges.append(int(region.size))
        run.truncated_regions += cut
        if region.size == 0:
            return []
        s = self.store
        ends = np.stack([np.asarray(s.heads[region], dtype=np.int64), np.asarray(s.tails[region], dtype=np.int64)])
        nodes, local = np.unique(ends, return_inverse=True)
        graph = LocalGraph.from_edges(local.reshape(2, -1), np.asarray(s.rels[region], dtype=np.int64), nodes.size)
        node_cost = [_on_nodes(nodes, c) for c in costs.nodes]
        stats = SearchStats()
        edges = [(e.head, e.tail) for e in pattern.edges]
        matches = topk_matches(
            graph, edges, node_cost, costs.relations, self.k, stats=stats, max_partial=self.max_partial
        )
        run.stats.partial_matches += stats.partial_matches
        run.stats.pruned += stats.pruned
        run.stats.complete += stats.complete
        run.truncated_searches += bool(self.max_partial is not None and stats.partial_matches > self.max_partial)
        return [Subgraph(m.distance, 0, tuple(int(region[e]) for e in m.edges)) for m in matches]

    def run(self, patterns: Sequence[Sequence[Pattern]]) -> StorePatternRun:
        """The top ``k`` distinct subgraphs of each question over all its patterns (merged as per question)."""
        run = StorePatternRun([], [list(p) for p in patterns])
        for pats in patterns:
            t0 = time.perf_counter()
            run.no_pattern += not pats
            found: list[tuple[Subgraph, int]] = []
            for j, pattern in enumerate(pats):
                matches = self._match(pattern, run)
                if matches is None:
                    run.no_anchor += 1
                    continue
                found += [(Subgraph(m.distance, j, m.edges), r) for r, m in enumerate(matches)]
            kept = merge_subgraphs(found, self.k)
            run.no_match += bool(pats) and not kept
            run.subgraphs.append(kept)
            run.seconds.append(time.perf_counter() - t0)
        return run


def _on_nodes(nodes: np.ndarray, cand: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """A node cost over the region's nodes (sorted store ids): 0 everywhere for UNKNOWN, else the
    candidates' costs where they lie in the region and ``inf`` elsewhere."""
    if cand is None:
        return np.zeros(nodes.size)
    out = np.full(nodes.size, np.inf)
    ids, cost = cand
    pos = np.searchsorted(nodes, ids)
    inside = (pos < nodes.size) & (nodes[np.minimum(pos, nodes.size - 1)] == ids)
    out[pos[inside]] = cost[inside]
    return out
