"""Compiled loops of the whole-KG store: adjacency by counting sort, k-hop expansion, personalized
PageRank on the expanded subgraph. Each is one pass over arrays (no Python per triple)."""

from __future__ import annotations

import numpy as np
from numba import njit

UNSEEN = -1


@njit(cache=True, nogil=True)
def count_keys(keys: np.ndarray, counts: np.ndarray) -> None:
    """``counts[k] += 1`` for every ``k`` of ``keys`` (a bincount without an int64 copy of ``keys``)."""
    for i in range(keys.size):
        counts[keys[i]] += 1


@njit(cache=True, nogil=True)
def bucket_edges(keys: np.ndarray, ptr: np.ndarray, out: np.ndarray, first_edge: int) -> None:
    """Edge ids ``first_edge + i`` placed at their key's slots (``ptr``: the next free slot of each
    key, advanced in place): a stable counting sort, edges of one key in file order."""
    for i in range(keys.size):
        k = keys[i]
        out[ptr[k]] = first_edge + i
        ptr[k] += 1


@njit(cache=True, nogil=True)
def _by_degree(frontier: np.ndarray, out_ptr: np.ndarray, in_ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each frontier node's degree (both ways) and the frontier's order by it, smallest first, stable."""
    degree = np.empty(frontier.size, dtype=np.int64)
    for i in range(frontier.size):
        u = frontier[i]
        degree[i] = out_ptr[u + 1] - out_ptr[u] + in_ptr[u + 1] - in_ptr[u]
    return degree, np.argsort(degree, kind="mergesort")


@njit(cache=True, nogil=True)
def expand(
    out_ptr: np.ndarray,
    out_edge: np.ndarray,
    in_ptr: np.ndarray,
    in_edge: np.ndarray,
    heads: np.ndarray,
    tails: np.ndarray,
    topics: np.ndarray,
    hops: int,
    budget: int,
    dist: np.ndarray,
    expanded: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The edges within ``hops`` of ``topics`` (both directions, each once) and the nodes reached.

    Frontier nodes are expanded smallest degree first; a node whose edges would take the edge count
    past ``budget`` is not expanded (it stays a leaf), except a topic, which gives its first
    ``budget`` edges. An edge between two expanded nodes is taken when the first of them is
    expanded. ``dist`` / ``expanded``: scratch arrays of every node at ``UNSEEN`` / 0, given back so."""
    edges = np.empty(max(budget, 16), dtype=np.int64)
    n_edges = 0
    nodes = np.empty(max(topics.size * 4, 16), dtype=np.int64)
    n_nodes = 0
    for t in topics:
        if dist[t] == UNSEEN:
            dist[t] = 0
            nodes[n_nodes] = t
            n_nodes += 1
    start, stop = 0, n_nodes
    for hop in range(hops):
        frontier = nodes[start:stop].copy()
        degree, order = _by_degree(frontier, out_ptr, in_ptr)
        for j in range(order.size):
            u = frontier[order[j]]
            room = budget - n_edges
            if degree[order[j]] > room and not (hop == 0 and room > 0):
                continue
            expanded[u] = 1
            for side in range(2):
                ptr, adj = (out_ptr, out_edge) if side == 0 else (in_ptr, in_edge)
                for k in range(ptr[u], ptr[u + 1]):
                    if n_edges >= budget:
                        break
                    e = adj[k]
                    v = tails[e] if side == 0 else heads[e]
                    if (expanded[v] and v != u) or (side == 1 and v == u):
                        continue  # taken when v was expanded; a self-loop once
                    edges[n_edges] = e
                    n_edges += 1
                    if dist[v] == UNSEEN:
                        dist[v] = hop + 1
                        if n_nodes == nodes.size:
                            nodes = np.concatenate((nodes, np.empty(nodes.size, dtype=np.int64)))
                        nodes[n_nodes] = v
                        n_nodes += 1
        start, stop = stop, n_nodes
    for i in range(n_nodes):
        dist[nodes[i]] = UNSEEN
        expanded[nodes[i]] = 0
    return edges[:n_edges], nodes[:n_nodes]


@njit(cache=True, nogil=True)
def edge_flow(
    edges: np.ndarray,
    heads: np.ndarray,
    tails: np.ndarray,
    nodes: np.ndarray,
    seeds: np.ndarray,
    local: np.ndarray,
    alpha: float,
    rounds: int,
) -> np.ndarray:
    """Personalized PageRank from ``seeds`` on the undirected subgraph of ``edges`` over ``nodes`` (every
    endpoint among them), ``rounds`` power iterations with restart probability ``alpha``; each edge's
    score is the rank that flows along it both ways (``p[u] / deg[u] + p[v] / deg[v]``). ``local``:
    a scratch array of every node at ``UNSEEN``, given back so."""
    n = nodes.size
    for i in range(n):
        local[nodes[i]] = i
    src = np.empty(edges.size, dtype=np.int64)
    dst = np.empty(edges.size, dtype=np.int64)
    deg = np.zeros(n, dtype=np.float64)
    for i in range(edges.size):
        src[i] = local[heads[edges[i]]]
        dst[i] = local[tails[edges[i]]]
        deg[src[i]] += 1.0
        deg[dst[i]] += 1.0
    restart = np.zeros(n, dtype=np.float64)
    for s in seeds:
        restart[local[s]] = 1.0 / seeds.size
    for i in range(n):
        local[nodes[i]] = UNSEEN
    p = restart.copy()
    for _ in range(rounds):
        nxt = alpha * restart
        for i in range(src.size):
            u, v = src[i], dst[i]
            nxt[v] += (1.0 - alpha) * p[u] / deg[u]
            nxt[u] += (1.0 - alpha) * p[v] / deg[v]
        p = nxt
    score = np.empty(src.size, dtype=np.float64)
    for i in range(src.size):
        score[i] = p[src[i]] / deg[src[i]] + p[dst[i]] / deg[dst[i]]
    return score
