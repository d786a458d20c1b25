"""A question's graph cut from the whole-KG store: k hops around its topic entities, capped.

The k-hop neighbourhood (both edge directions, as RoG's graphs were cut from Freebase) is expanded
smallest-degree node first under an edge budget (``budget_factor`` times the cap), so a hub
reached at the last hop stays a leaf instead of bringing in its millions of edges. When more than
``max_triples`` edges are reached, the ones kept are those personalized PageRank from the topic
entities sends the most rank along (GraftNet's and OKGQA's pruning), ties broken by edge id: the
same graph on every run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gsr_train.kg import store_kernels as SK
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.store import KGStore


@dataclass
class EdgeArrays:
    """A graph as the extractor reads it (what a `KGStore` holds): triples' ends and the edges at
    each node both ways, edge ids ascending within a node (the store's counting-sort order)."""

    heads: np.ndarray
    tails: np.ndarray
    out_ptr: np.ndarray
    out_edge: np.ndarray
    in_ptr: np.ndarray
    in_edge: np.ndarray

    @classmethod
    def of(cls, heads: np.ndarray, tails: np.ndarray, num_entities: int) -> EdgeArrays:
        heads, tails = np.asarray(heads, dtype=np.int64), np.asarray(tails, dtype=np.int64)
        ptrs, edges = [], []
        for ends in (heads, tails):
            ptr = np.zeros(num_entities + 1, dtype=np.int64)
            np.cumsum(np.bincount(ends, minlength=num_entities), out=ptr[1:])
            ptrs.append(ptr)
            edges.append(np.argsort(ends, kind="stable"))
        return cls(heads, tails, ptrs[0], edges[0], ptrs[1], edges[1])

    @property
    def num_entities(self) -> int:
        return int(self.out_ptr.size - 1)

    @property
    def num_triples(self) -> int:
        return int(self.heads.size)


class Extractor:
    """Cuts graphs from one store, or any `EdgeArrays` (scratch arrays of its size, reused by
    every question)."""

    def __init__(self, store: KGStore | EdgeArrays, options: ExtractOptions | None = None) -> None:
        self.store = store
        self.options = options or ExtractOptions()
        # 6 bytes an entity: hops fit int8, a subgraph's local ids int32
        self._dist = np.full(store.num_entities, SK.UNSEEN, dtype=np.int8)
        self._local = np.full(store.num_entities, SK.UNSEEN, dtype=np.int32)
        self._expanded = np.zeros(store.num_entities, dtype=np.uint8)
        s = store
        self._arrays = tuple(np.asarray(a) for a in (s.out_ptr, s.out_edge, s.in_ptr, s.in_edge, s.heads, s.tails))

    def edges(self, topics: np.ndarray) -> np.ndarray:
        """Edge ids of the graph around ``topics`` (store entity ids), ascending."""
        topics = np.unique(np.asarray(topics, dtype=np.int64))
        if topics.size == 0 or self.store.num_triples == 0:
            return np.zeros(0, dtype=np.int64)
        o = self.options
        budget = max(o.budget_factor * o.max_triples, o.max_triples)
        edges, nodes = SK.expand(*self._arrays, topics, o.hops, budget, self._dist, self._expanded)  # type: ignore[call-arg,arg-type]
        edges = np.sort(edges)
        if edges.size <= o.max_triples:
            return edges
        heads, tails = self._arrays[4], self._arrays[5]
        score = SK.edge_flow(edges, heads, tails, nodes, topics, self._local, o.alpha, o.rounds)
        keep = np.argsort(-score, kind="stable")[: o.max_triples]  # ties: the lower edge id
        return np.sort(edges[keep])
