"""Walks on the whole-KG store: relation chains executed from topic entities (GSR on the whole KG) and
the region a pattern search needs (SimGRAG on the whole KG). Both follow edges in both directions, as
the per-question chain execution (`gsr_train.kg.execution`) and pattern search do, and both
stop at an edge budget (the walk is then marked truncated) so a hub cannot pull in millions of edges.
The loops are compiled; no Python runs per triple.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from gsr_train.kg.store import KGStore
from gsr_train.kg.store_kernels import UNSEEN


@njit(cache=True, nogil=True)
def _chain_step(
    out_ptr, out_edge, in_ptr, in_edge, heads, tails, rels, frontier, rel, budget
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """One hop of a chain: every edge of relation ``rel`` at a ``frontier`` node, either way, as
    (edge, from, to); and whether ``budget`` edges were reached first."""
    edges = np.empty(16, dtype=np.int64)
    src = np.empty(16, dtype=np.int64)
    dst = np.empty(16, dtype=np.int64)
    n = 0
    truncated = False
    for u in frontier:
        for side in range(2):
            ptr, adj = (out_ptr, out_edge) if side == 0 else (in_ptr, in_edge)
            for k in range(ptr[u], ptr[u + 1]):
                e = adj[k]
                if rels[e] != rel:
                    continue
                if n == budget:
                    truncated = True
                    break
                if n == edges.size:
                    edges = np.concatenate((edges, np.empty(n, dtype=np.int64)))
                    src = np.concatenate((src, np.empty(n, dtype=np.int64)))
                    dst = np.concatenate((dst, np.empty(n, dtype=np.int64)))
                edges[n], src[n], dst[n] = e, u, (tails[e] if side == 0 else heads[e])
                n += 1
    return edges[:n], src[:n], dst[:n], truncated


@njit(cache=True, nogil=True)
def _region(
    out_ptr, out_edge, in_ptr, in_edge, heads, tails, rels, seeds, hops, rel_ok, budget, dist
) -> tuple[np.ndarray, bool]:
    """The edges whose relation is ``rel_ok`` within ``hops`` of ``seeds`` (both ways, each once),
    including the edges between two nodes of the last hop; and whether ``budget`` cut it short.
    ``dist``: scratch hop counts of every node at ``UNSEEN``, given back so."""
    edges = np.empty(16, dtype=np.int64)
    n_edges = 0
    nodes = np.empty(max(seeds.size, 16), dtype=np.int64)
    n_nodes = 0
    for s in seeds:
        if dist[s] == UNSEEN:
            dist[s] = 0
            nodes[n_nodes] = s
            n_nodes += 1
    truncated = False
    start, stop = 0, n_nodes
    for hop in range(hops + 1):  # the last round only joins nodes already reached
        for i in range(start, stop):
            u = nodes[i]
            for side in range(2):
                ptr, adj = (out_ptr, out_edge) if side == 0 else (in_ptr, in_edge)
                for k in range(ptr[u], ptr[u + 1]):
                    e = adj[k]
                    if not rel_ok[rels[e]]:
                        continue
                    v = tails[e] if side == 0 else heads[e]
                    if side == 1 and v == u:
                        continue  # a self-loop once
                    dv = dist[v]
                    if dv != UNSEEN and (dv < hop or (dv == hop and v < u)):
                        continue  # taken from v's side
                    if dv == UNSEEN and hop == hops:
                        continue  # beyond the region
                    if n_edges == budget:
                        truncated = True
                        break
                    if n_edges == edges.size:
                        edges = np.concatenate((edges, np.empty(n_edges, dtype=np.int64)))
                    edges[n_edges] = e
                    n_edges += 1
                    if dv == UNSEEN:
                        dist[v] = hop + 1
                        if n_nodes == nodes.size:
                            nodes = np.concatenate((nodes, np.empty(n_nodes, dtype=np.int64)))
                        nodes[n_nodes] = v
                        n_nodes += 1
        start, stop = stop, n_nodes
    for i in range(n_nodes):
        dist[nodes[i]] = UNSEEN
    return edges[:n_edges], truncated


@dataclass
class StoreWalk:
    """One chain executed on the store: the edges on complete walks (hop order), the entities reached."""

    chain: tuple[int, ...]
    edges: np.ndarray
    ends: np.ndarray
    truncated: bool

    @property
    def valid(self) -> bool:
        return self.ends.size > 0


class StoreWalker:
    """Chains and pattern regions on one store (scratch arrays of the store's size, reused)."""

    def __init__(self, store: KGStore, max_edges: int = 200_000) -> None:
        if max_edges < 1:
            raise ValueError(f"max_edges must be >= 1, got {max_edges}")
        self.store, self.max_edges = store, int(max_edges)
        s = store
        self._arrays = tuple(
            np.asarray(a) for a in (s.out_ptr, s.out_edge, s.in_ptr, s.in_edge, s.heads, s.tails, s.rels)
        )
        self._dist = np.full(store.num_entities, UNSEEN, dtype=np.int8)

    def chain(self, topics: np.ndarray, chain: tuple[int, ...]) -> StoreWalk:
        """Execute ``chain`` (store relation ids) from ``topics``; a walk's edges are kept only where
        it reaches the chain's end (the backward sweep of the per-question execution)."""
        frontier = np.unique(np.asarray(topics, dtype=np.int64))
        steps, truncated = [], False
        for rel in chain:
            if frontier.size == 0:
                break
            e, src, dst, cut = _chain_step(*self._arrays, frontier, rel, self.max_edges)  # type: ignore[call-arg]
            truncated |= bool(cut)
            steps.append((e, src, dst))
            frontier = np.unique(dst)
        if len(steps) < len(chain) or frontier.size == 0:
            return StoreWalk(tuple(chain), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), truncated)
        alive, kept = frontier, []
        for e, src, dst in reversed(steps):
            on = np.isin(dst, alive)
            kept.append(e[on])
            alive = np.unique(src[on])
        edges = np.concatenate(kept[::-1])
        return StoreWalk(tuple(chain), edges, frontier, truncated)

    def region(self, seeds: np.ndarray, hops: int, rel_ok: np.ndarray) -> tuple[np.ndarray, bool]:
        """Edge ids (ascending) of relations ``rel_ok`` (a flag per store relation) within ``hops`` of
        ``seeds``, edges among the last hop's nodes included; and whether ``max_edges`` cut it."""
        seeds = np.unique(np.asarray(seeds, dtype=np.int64))
        rel_ok = np.asarray(rel_ok, dtype=np.uint8)
        if rel_ok.shape != (len(self.store.relations),):
            raise ValueError(f"rel_ok has shape {rel_ok.shape}, expected ({len(self.store.relations)},)")
        edges, cut = _region(*self._arrays, seeds, int(hops), rel_ok, self.max_edges, self._dist)  # type: ignore[call-arg]
        return np.sort(edges), bool(cut)
