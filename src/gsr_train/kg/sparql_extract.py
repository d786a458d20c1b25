"""A question's graph cut from a SPARQL endpoint exactly as :mod:`gsr_train.kg.extract` cuts it from a store.

The k-hop neighbourhood is fetched hop by hop (every edge at each frontier entity, both directions,
``batch`` entities a query, ``limit`` edges per entity and direction), so every entity closer than
``hops`` has all its edges, as in the store. The fetched triples, in canonical order (sorted by head,
relation, tail), become a local graph and the store's own extraction runs on it: the smallest-degree
expansion under the edge budget, then personalized PageRank down to ``max_triples``. On the same KG
(a store imported from a file in the same canonical order) the graphs are the same, as long as no
entity's edges were cut by ``limit``; cuts are counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gsr_train.kg.extract import EdgeArrays, Extractor
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.sparql import SparqlClient, SparqlError, batched, edges_query

Triple = tuple[str, str, str]


@dataclass
class Neighbourhood:
    """The triples within ``hops`` of the topics (canonical order) and the entities whose edges were cut."""

    triples: list[Triple]
    cut: list[str] = field(default_factory=list)


class SparqlExtractor:
    """Cuts graphs from one endpoint (see the module docstring)."""

    def __init__(self, client: SparqlClient, options: ExtractOptions | None = None) -> None:
        self.client, self.options = client, options or ExtractOptions()

    def _edges_at(self, entities: Sequence[str], cut: list[str], topics: bool) -> set[Triple]:
        """Every edge at ``entities`` (both ways). An entity with more than ``limit`` in a direction is
        a hub: a topic keeps its first ``limit``, any other none (a leaf, as the store's edge budget
        leaves a hub: with ``limit`` at least the budget, the store never expands it either)."""
        limit, endpoint = self.client.options.limit, self.client.endpoint
        queries = [edges_query(b, limit) for b in batched(list(entities), self.client.options.batch)]
        found: set[Triple] = set()
        for cols in self.client.columns_many(queries):
            x, d, p, y = (cols.get(v, []) for v in ("x", "d", "p", "y"))
            if not len(x) == len(d) == len(p) == len(y) or None in x or None in p or None in y:
                raise SparqlError(f"SPARQL endpoint {endpoint}: an edge row without x, p or y")
            if any(v not in ("0", "1") for v in set(d)):
                raise SparqlError(f"SPARQL endpoint {endpoint}: an edge row whose direction is not 0 or 1")
            x, d, p, y = _cut_hubs(x, d, p, y, limit, cut, keep=limit if topics else 0)
            found.update((a, r, b) if f == "0" else (b, r, a) for a, f, r, b in zip(x, d, p, y))
        return found

    def neighbourhood(self, topics: Sequence[str]) -> Neighbourhood:
        hops = self.options.hops
        reached = set(topics)
        frontier = sorted(reached)
        triples: set[Triple] = set()
        cut: list[str] = []
        frontier_is_topics = True
        for _ in range(hops):
            if not frontier:
                break
            new = self._edges_at(frontier, cut, topics=frontier_is_topics)
            frontier_is_topics = False
            triples |= new
            ends = {e for h, _, t in new for e in (h, t)}
            frontier = sorted(ends - reached)
            reached |= ends
        return Neighbourhood(sorted(triples), sorted(set(cut)))

    def cut(self, topics: Sequence[str]) -> tuple[list[Triple], Neighbourhood]:
        """The question's graph (canonical order) and the neighbourhood it was cut from."""
        near = self.neighbourhood(topics)
        if not near.triples:
            return [], near
        table = np.asarray(near.triples, dtype=object)
        names, local = np.unique(table[:, [0, 2]].astype(str), return_inverse=True)
        local = local.reshape(-1, 2)
        arrays = EdgeArrays.of(local[:, 0], local[:, 1], names.size)
        asked = np.asarray(sorted(set(topics)), dtype=str)
        pos = np.minimum(np.searchsorted(names, asked), names.size - 1)
        edges = Extractor(arrays, self.options).edges(pos[names[pos] == asked])  # topics with an edge
        return [near.triples[e] for e in edges.tolist()], near


def _cut_hubs(
    x: list, d: list, p: list, y: list, limit: int, cut: list[str], keep: int
) -> tuple[list, list, list, list]:
    """The rows without the hubs' (an entity with more than ``limit`` rows in a direction: it goes to
    ``cut`` and keeps its first ``keep``); as given when there is none (one counting pass)."""
    counts = Counter(zip(x, d))
    if not counts or max(counts.values()) <= limit:
        return x, d, p, y
    hubs = {e for (e, _), n in counts.items() if n > limit}
    cut.extend(sorted(hubs))
    seen: Counter = Counter()
    rows = []
    for i, (e, k) in enumerate(zip(x, d)):
        if e in hubs:
            seen[e, k] += 1
            if seen[e, k] > keep:
                continue
        rows.append(i)
    return [x[i] for i in rows], [d[i] for i in rows], [p[i] for i in rows], [y[i] for i in rows]
