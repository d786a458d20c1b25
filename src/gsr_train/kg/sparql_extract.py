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
from gsr_train.kg.sparql import SparqlClient, SparqlError, batched, edges_query

Triple = tuple[str, str, str]
ENTITY_FORMAT = 1  # part of each entity's cache key


@dataclass
class EntityEdges:
    """One entity's edges as the endpoint answered them: relation and other end, each direction; ``hub``:
    it has more than ``limit`` in a direction (only the first ``limit`` are kept)."""

    out_p: list[str]
    out_y: list[str]
    in_p: list[str]
    in_y: list[str]
    hub: bool

    def astuple(self) -> tuple:
        return (self.out_p, self.out_y, self.in_p, self.in_y, self.hub)


@dataclass
class Neighbourhood:
    """The triples within ``hops`` of the topics (canonical order) and the entities whose edges were cut."""

    triples: list[Triple]
    cut: list[str] = field(default_factory=list)


class SparqlExtractor:
    """Cuts graphs from one endpoint (see the module docstring)."""

    def __init__(self, client: SparqlClient, options: ExtractOptions | None = None, memo: int = 200_000) -> None:
        self.client, self.options = client, options or ExtractOptions()
        self.memo_size = memo
        self._memo: dict[str, EntityEdges] = {}  # this run's entities, parsed (the cache holds them for later runs)

    def _entity_key(self, entity: str) -> str:
        return self.client.key(f"edges of {entity}, limit {self.client.options.limit}, v{ENTITY_FORMAT}")

    def _known(self, entity: str) -> EntityEdges | None:
        found = self._memo.get(entity)
        if found is None and self.client.cache is not None:
            body = self.client.cache.get(self._entity_key(entity))
            if body is not None:
                self.client.stats.count("entities_cached")
                found = EntityEdges(*body["edges"])
                self._remember(entity, found)
        return found

    def _remember(self, entity: str, edges: EntityEdges) -> None:
        if len(self._memo) >= self.memo_size:
            self._memo.clear()
        self._memo[entity] = edges

    def _fetch(self, entities: list[str]) -> None:
        """Ask the endpoint for the edges of ``entities`` (batched) and keep each entity's on its own."""
        limit, endpoint = self.client.options.limit, self.client.endpoint
        queries = [edges_query(b, limit) for b in batched(entities, self.client.options.batch)]
        by_entity: dict[str, EntityEdges] = {e: EntityEdges([], [], [], [], False) for e in entities}
        for cols in self.client.columns_many(queries, keep=False):
            x, d, p, y = (cols.get(v, []) for v in ("x", "d", "p", "y"))
            if not len(x) == len(d) == len(p) == len(y) or None in x or None in p or None in y:
                raise SparqlError(f"SPARQL endpoint {endpoint}: an edge row without x, p or y")
            for e, f, r, o in zip(x, d, p, y):
                edges = by_entity.get(e)
                if edges is None or f not in ("0", "1"):
                    raise SparqlError(
                        f"SPARQL endpoint {endpoint}: an edge row of {e!r} (direction {f!r}) not asked for"
                    )
                side = (edges.out_p, edges.out_y) if f == "0" else (edges.in_p, edges.in_y)
                if len(side[0]) == limit:
                    edges.hub = True  # the extra row: more than limit
                    continue
                side[0].append(r)
                side[1].append(o)
        for e, edges in by_entity.items():
            if self.client.cache is not None:
                self.client.cache.put(self._entity_key(e), {"endpoint": endpoint}, {"edges": list(edges.astuple())})
            self._remember(e, edges)

    def _edges_at(self, entities: Sequence[str], cut: list[str], topics: bool) -> set[Triple]:
        """Every edge at ``entities`` (both ways). An entity with more than ``limit`` in a direction is
        a hub: a topic keeps its first ``limit``, any other none (a leaf, as the store's edge budget
        leaves a hub)."""
        missing = [e for e in entities if self._known(e) is None]
        if missing:
            self._fetch(missing)
        found: set[Triple] = set()
        for e in entities:
            edges = self._memo[e]
            if edges.hub:
                cut.append(e)
                if not topics:
                    continue
            found.update(zip([e] * len(edges.out_p), edges.out_p, edges.out_y))
            found.update(zip(edges.in_y, edges.in_p, [e] * len(edges.in_p)))
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
