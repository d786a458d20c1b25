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

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gsr_train.kg.extract import EdgeArrays, Extractor
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.sparql import SparqlClient, batched, edges_query

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

    def _edges_at(self, entities: Sequence[str], cut: list[str]) -> set[Triple]:
        """Every edge at ``entities`` (both ways, ``limit`` per entity and direction)."""
        limit = self.client.options.limit
        queries = [edges_query(b, limit) for b in batched(list(entities), self.client.options.batch)]
        found: set[Triple] = set()
        for rows in self.client.select_many(queries):
            seen: dict[tuple[str, str], int] = {}
            for row in rows:
                x, d = row.get("x"), row.get("d")
                if x is None or d not in ("0", "1") or "p" not in row or "y" not in row:
                    raise ValueError(f"SPARQL endpoint {self.client.endpoint}: a row without x, d, p, y: {row}")
                n = seen.get((x, d), 0) + 1
                seen[(x, d)] = n
                if n > limit:  # the extra row: this entity's edges were cut
                    cut.append(x)
                    continue
                found.add((x, row["p"], row["y"]) if d == "0" else (row["y"], row["p"], x))
        return found

    def neighbourhood(self, topics: Sequence[str]) -> Neighbourhood:
        hops = self.options.hops
        reached = set(topics)
        frontier = sorted(reached)
        triples: set[Triple] = set()
        cut: list[str] = []
        for _ in range(hops):
            if not frontier:
                break
            new = self._edges_at(frontier, cut)
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
