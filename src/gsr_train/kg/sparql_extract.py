"""A question's graph cut from a SPARQL endpoint exactly as `gsr_train.kg.extract` cuts it from a store.

The k-hop neighbourhood is fetched hop by hop (every edge at each frontier entity, both directions,
``batch`` entities a query, ``limit`` edges per entity and direction), so every entity closer than
``hops`` has all its edges, as in the store. The fetched triples, in canonical order (sorted by head,
relation, tail), become a local graph and the store's own extraction runs on it: the smallest-degree
expansion under the edge budget, then personalized PageRank down to ``max_triples``. On the same KG
(a store imported from a file in the same canonical order) the graphs are the same, as long as no
entity's edges were cut by ``limit``; cuts are counted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gsr_train.kg.extract import EdgeArrays, Extractor
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.sparql import (
    Columns,
    SparqlClient,
    SparqlError,
    all_edges_query,
    batched,
    edge_counts_query,
    edges_query,
)

log = logging.getLogger(__name__)
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


Units = dict[tuple[str, int], int]  # (entity, direction: 0 out, 1 in) -> its edge count as the endpoint counted


def edge_queries(counts: dict[str, tuple[int, int]], limit: int, batch: int) -> dict[str, Units]:
    """The queries that fetch the counted entities' edges, each with what it asks for. A direction of more
    than ``limit`` edges (a hub's) is asked alone, its first ``limit + 1`` in order; the others are packed
    into ``VALUES`` queries of at most ``batch`` entities and ``limit + 1`` rows (the row cap of Virtuoso and
    DBpedia with the default limit: a longer answer would be cut short without a word)."""
    queries: dict[str, Units] = {}
    packs: list[Units] = [{}]
    rows, entities = 0, set[str]()  # the last pack's
    for e, (out, into) in counts.items():
        if e.startswith("_:"):  # a blank node label: no VALUES term
            queries[edges_query([e], limit)] = {(e, 0): out, (e, 1): into}
            continue
        for d, n in ((0, out), (1, into)):
            if n > limit:
                queries[edges_query([e], limit, direction=d)] = {(e, d): n}
            elif n:
                if packs[-1] and (rows + n > limit + 1 or (e not in entities and len(entities) >= batch)):
                    packs.append({})
                    rows, entities = 0, set()
                packs[-1][(e, d)] = n
                rows += n
                entities.add(e)
    for pack in filter(None, packs):
        queries[all_edges_query(*([e for (e, d) in pack if d == side] for side in (0, 1)))] = pack
    return queries


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
        """Ask the endpoint for the edges of ``entities`` and keep each entity's on its own, as soon as its
        last answer arrives (a run killed mid-hop asks again only what was in flight). First each entity's
        edge counts (one without edges is known then), then its edges, in queries `edge_queries` packs."""
        counts = self._edge_counts(entities)
        pending = {e: EntityEdges([], [], [], [], False) for e in counts}
        left = {e: sum(1 for c in counts[e] if c) for e in counts}  # directions still to come
        queries = edge_queries(counts, self.client.options.limit, self.client.options.batch)
        for query, cols in self.client.columns_iter(list(queries), keep=False):
            units = queries[query]
            self._split_rows(cols, pending, units)
            for e, _ in units:
                left[e] -= 1
                if not left[e]:
                    self._keep(e, pending.pop(e))

    def _edge_counts(self, entities: list[str]) -> dict[str, tuple[int, int]]:
        """Each entity's edges out and in, as the endpoint counts them (literals left out); an entity without
        any is kept (with no edges) as its batch's answer arrives."""
        names = [e for e in entities if not e.startswith("_:")]  # a blank node label is no VALUES term
        counts = {e: (1, 1) for e in entities if e.startswith("_:")}  # asked with `edges_query`
        batches = {edge_counts_query(b): b for b in batched(names, self.client.options.batch)}
        for query, cols in self.client.columns_iter(list(batches), keep=False):
            x, d, n = (cols.get(v, []) for v in ("x", "d", "n"))
            if not len(x) == len(d) == len(n) or None in x or None in d or None in n:
                raise SparqlError(f"SPARQL endpoint {self.client.endpoint}: an edge count row without x, d or n")
            for e, side, k in zip(x, d, n, strict=True):
                if not str(k).isdigit():
                    raise SparqlError(f"SPARQL endpoint {self.client.endpoint}: an edge count of {e!r} is {k!r}")
                out, into = counts.get(e, (0, 0))
                counts[e] = (int(k), into) if str(side) == "0" else (out, int(k))
            for e in batches[query]:
                if e not in counts:
                    self._keep(e, EntityEdges([], [], [], [], False))
        return counts

    def _keep(self, entity: str, edges: EntityEdges) -> None:
        if self.client.cache is not None:
            body = {"edges": list(edges.astuple())}
            self.client.cache.put(self._entity_key(entity), {"endpoint": self.client.endpoint}, body)
        self._remember(entity, edges)

    def _split_rows(self, cols: Columns, pending: dict[str, EntityEdges], units: Units) -> None:
        """One answer's rows ``?x ?d ?p ?y`` into the edges of the ``units`` it was asked for, a direction at a
        time (Arrow sorts and slices; no loop over rows); rows of another direction are left out. More than
        ``limit`` rows: a hub; more than the ``limit + 1`` asked for (an endpoint that ignores LIMIT):
        counted and dropped; fewer than counted (an endpoint's row cap below ``limit + 1``): counted."""
        endpoint = self.client.endpoint
        x, d, p, y = (cols.get(v, []) for v in ("x", "d", "p", "y"))
        if not len(x) == len(d) == len(p) == len(y) or None in x or None in p or None in y:
            raise SparqlError(f"SPARQL endpoint {endpoint}: an edge row without x, p or y")
        names = list(dict.fromkeys(e for e, _ in units))
        codes = pc.index_in(pa.array(x, pa.string()), value_set=pa.array(names, pa.string()))
        side = pc.index_in(pa.array(d, pa.string()), value_set=pa.array(["0", "1"]))
        bad = pc.or_(pc.is_null(codes), pc.is_null(side)).to_numpy(zero_copy_only=False)
        if bad.any():
            k = int(np.argmax(bad))
            raise SparqlError(f"SPARQL endpoint {endpoint}: an edge row of {x[k]!r} (direction {d[k]!r}) not asked for")
        group = codes.to_numpy(zero_copy_only=False).astype(np.int64) * 2 + side.to_numpy(zero_copy_only=False)
        index = {e: i for i, e in enumerate(names)}
        counted = {index[e] * 2 + d_: c for (e, d_), c in units.items()}  # each unit's group
        rows = np.flatnonzero(np.isin(group, list(counted)))
        order = rows[np.argsort(group[rows], kind="stable")]  # the endpoint's order kept within a group
        counts = np.bincount(group[rows], minlength=2 * len(names))
        starts = np.concatenate([[0], np.cumsum(counts)])
        ps, ys = (pa.array(c, pa.string()).take(pa.array(order)).to_pylist() for c in (p, y))
        self._check_counts(counts, counted)
        limit = self.client.options.limit
        for g in np.flatnonzero(counts).tolist():
            edges = pending[names[g // 2]]
            a, n = int(starts[g]), int(counts[g])
            keep = slice(a, a + min(n, limit))
            if g % 2 == 0:
                edges.out_p, edges.out_y = ps[keep], ys[keep]
            else:
                edges.in_p, edges.in_y = ps[keep], ys[keep]
            edges.hub = edges.hub or n > limit  # the extra row: more than limit

    def _check_counts(self, got: np.ndarray, counted: dict[int, int]) -> None:
        """Count (and say once a query) the rows beyond ``limit + 1`` a direction, and the directions answered
        with fewer rows than the endpoint counted for them (below ``limit``: it cut its answer short)."""
        limit = self.client.options.limit
        extra = int(np.maximum(got - (limit + 1), 0).sum())
        self._tell("rows_beyond_limit", extra, "edge rows beyond the %d asked for an entity and direction "
                   "(data.sparql.limit=%d): dropped", limit + 1, limit)  # fmt: skip
        short = sum(1 for g, c in counted.items() if c <= limit and int(got[g]) < c)
        self._tell("directions_cut_short", short, "entity directions with fewer edges than it counted: its row "
                   "cap is below data.sparql.limit + 1 (%d); lower data.sparql.limit to it", limit + 1)  # fmt: skip

    def _tell(self, stat: str, n: int, what: str, *args: object) -> None:
        """``n`` (when any) counted as ``stat`` and said in one warning naming the endpoint."""
        if n:
            self.client.stats.count(stat, n)
            log.warning(f"SPARQL endpoint %s answered %d {what}", self.client.endpoint, n, *args)

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

    def cut(self, topics: Sequence[str]) -> GraphCut:
        """The question's graph (canonical order): read from the cache when this KG, limit and options
        cut it before (a rerun reads one row a question), else cut from the neighbourhood and kept."""
        key = self.client.key(
            f"graph of {sorted(set(topics))}, {asdict(self.options)}, limit {self.client.options.limit}"
        )
        body = self.client.cache.get(key) if self.client.cache is not None else None
        if body is not None:
            self.client.stats.count("graphs_cached")
            return GraphCut.from_body(body)
        made = self._cut(topics)
        if self.client.cache is not None:
            self.client.cache.put(key, {"endpoint": self.client.endpoint}, made.body())
        return made

    def _cut(self, topics: Sequence[str]) -> GraphCut:
        near = self.neighbourhood(topics)
        if not near.triples:
            return GraphCut([], near.cut, 0)
        table = np.asarray(near.triples, dtype=object)
        names, local = np.unique(table[:, [0, 2]].astype(str), return_inverse=True)
        local = local.reshape(-1, 2)
        arrays = EdgeArrays.of(local[:, 0], local[:, 1], names.size)
        asked = np.asarray(sorted(set(topics)), dtype=str)
        pos = np.minimum(np.searchsorted(names, asked), names.size - 1)
        edges = Extractor(arrays, self.options).edges(pos[names[pos] == asked])  # topics with an edge
        return GraphCut([near.triples[e] for e in edges.tolist()], near.cut, len(near.triples))


@dataclass
class GraphCut:
    """A question's graph, the hubs whose edges were cut at ``limit`` and the size of the neighbourhood
    it was cut from (before PageRank's cap)."""

    triples: list[Triple]
    hubs: list[str]
    reached: int

    def body(self) -> dict:
        """Compact for the cache: each name once, the triples as positions."""
        names = sorted({x for t in self.triples for x in t})
        at = {n: i for i, n in enumerate(names)}
        return {
            "names": names,
            "triples": [at[x] for t in self.triples for x in t],
            "hubs": self.hubs,
            "reached": self.reached,
        }

    @classmethod
    def from_body(cls, body: dict) -> GraphCut:
        names, flat = body["names"], body["triples"]
        parts = [names[i] for i in flat]
        return cls(list(zip(parts[0::3], parts[1::3], parts[2::3])), body["hubs"], body["reached"])
