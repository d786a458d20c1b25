"""Top-k pattern matching on one question graph (SimGRAG Algorithm 1 + its section 5.2).

Inputs are cost tables, so SimGRAG (embedding L2 distances) and SAFE (type distances) share
one search: ``node_cost[p]`` is a ``[num_nodes]`` array per pattern node (``inf`` = not a
candidate, ``0`` everywhere for an UNKNOWN node) and ``rel_cost[i]`` a ``[num_relations]``
array per pattern edge, indexed by the graph's relation ids. A match maps pattern nodes
injectively to graph nodes and every pattern edge to one graph edge between the mapped
nodes (either direction: both papers ignore edge direction); its distance is the sum of
the mapped node and relation costs (the generalised graph semantic distance, eq. 3).

The exact search (`topk_matches`) orders pattern edges by a DFS from the pattern
node with the fewest candidates, and extends partial matches one edge at a time. With
``prune=True`` it adds the paper's two optimisations without losing exactness:

* lower bound ``B = mapped cost + X + Y`` where X / Y are the sums of the cheapest
  candidate cost of every still unmapped node / edge; a branch whose ``B`` exceeds the
  k-th best distance found so far is cut;
* greedy order: start candidates and each expansion's (relation, node) pairs are tried in
  ascending cost, so good matches fill the top-k early and, since the candidates are
  sorted, the first one that fails the bound ends the whole loop.

Per expansion the candidate costs of all incident edges are computed at once (numpy
slices of precomputed per-edge cost arrays); only the DFS itself is a Python loop.
Results are distinct subgraphs (edge sets): two mappings yielding the same edges keep the
cheaper one. `brute_force_matches` enumerates everything, for tests.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

INF = math.inf
_TOL = 1e-9  # bound slack against float rounding (never prunes a tie)


@dataclass
class LocalGraph:
    """Undirected CSR adjacency of one question graph: both directions of every edge."""

    num_nodes: int
    ptr: np.ndarray  # [N+1]
    nbr: np.ndarray  # [2E] neighbour node
    rel: np.ndarray  # [2E] relation id
    edge: np.ndarray  # [2E] edge id (position in the question's edge list)
    heads: np.ndarray  # [E]
    tails: np.ndarray  # [E]
    rels: np.ndarray  # [E]

    @classmethod
    def from_edges(
        cls, edge_index: torch.Tensor | np.ndarray, edge_rel: torch.Tensor | np.ndarray, num_nodes: int
    ) -> LocalGraph:
        ei = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
        er = np.asarray(edge_rel, dtype=np.int64).reshape(-1)
        num_e = er.shape[0]
        src = np.concatenate([ei[0], ei[1]])
        dst = np.concatenate([ei[1], ei[0]])
        eid = np.concatenate([np.arange(num_e), np.arange(num_e)])
        keep = src != dst  # a self-loop cannot realise an edge between two distinct nodes
        src, dst, eid = src[keep], dst[keep], eid[keep]
        order = np.argsort(src, kind="stable")
        ptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=num_nodes), out=ptr[1:])
        return cls(num_nodes, ptr, dst[order], er[eid[order]], eid[order], ei[0], ei[1], er)


@dataclass(order=True)
class Match:
    distance: float
    edges: tuple[int, ...] = field(compare=False)  # graph edge id per pattern edge
    nodes: tuple[int, ...] = field(compare=False)  # graph node per pattern node

    @property
    def key(self) -> frozenset:
        return frozenset(self.edges)


@dataclass
class SearchStats:
    partial_matches: int = 0  # partial mappings extended (Expand calls), incl. the start ones
    complete: int = 0  # complete matches reached
    pruned: int = 0  # branches cut by the lower bound


def _plan(pattern_edges: Sequence[tuple[int, int]], num_nodes: int, start: int):
    """DFS edge order from ``start``: list of (edge index, mapped end, other end, other is new)."""
    adj: dict[int, list[tuple[int, int]]] = {u: [] for u in range(num_nodes)}
    for i, (h, t) in enumerate(pattern_edges):
        adj[h].append((i, t))
        adj[t].append((i, h))
    order, seen_nodes, seen_edges = [], {start}, set()
    stack = [start]
    while stack:
        u = stack[-1]
        nxt = next(((i, v) for i, v in adj[u] if i not in seen_edges), None)
        if nxt is None:
            stack.pop()
            continue
        i, v = nxt
        seen_edges.add(i)
        new = v not in seen_nodes
        order.append((i, u, v, new))
        if new:
            seen_nodes.add(v)
            stack.append(v)
    if len(seen_edges) != len(pattern_edges) or len(seen_nodes) != num_nodes:
        raise ValueError("pattern is not connected")
    return order


class _TopK:
    """The k best distinct subgraphs so far, in the total order (distance, sorted edge ids),
    so ties are cut exactly as `brute_force_matches` cuts them; ``worst`` is the
    pruning threshold."""

    def __init__(self, k: int):
        self.k = k
        self.best: dict[frozenset, Match] = {}
        self.order: list[tuple[float, tuple[int, ...]]] = []  # sorted (distance, edge ids)

    @property
    def worst(self) -> float:
        return self.order[-1][0] if len(self.order) >= self.k else INF

    @property
    def limit(self) -> float:
        """``worst`` with slack against float rounding: a distance above it cannot enter."""
        worst = self.worst
        return worst + _TOL * (1.0 + abs(worst))

    def push(self, m: Match) -> None:
        key = m.key
        rank = (m.distance, tuple(sorted(m.edges)))
        old = self.best.get(key)
        if old is not None:
            if m.distance < old.distance:
                self.order.remove((old.distance, rank[1]))
                self.best[key] = m
                bisect.insort(self.order, rank)
            return
        if len(self.order) >= self.k:
            if rank >= self.order[-1]:
                return
            _, gone = self.order.pop()
            del self.best[frozenset(gone)]
        self.best[key] = m
        bisect.insort(self.order, rank)

    def result(self) -> list[Match]:
        return [self.best[frozenset(e)] for _, e in self.order]


def _distance(node_cost, rel_cost, rels, nodes, edges) -> float:
    """Canonical summation order, shared with the brute force (exact tie comparisons)."""
    return float(
        sum(float(node_cost[p][v]) for p, v in enumerate(nodes))
        + sum(float(rel_cost[i][rels[e]]) for i, e in enumerate(edges))
    )


def _check_costs(
    graph: LocalGraph,
    pattern_edges: Sequence[tuple[int, int]],
    node_cost: Sequence[np.ndarray],
    rel_cost: Sequence[np.ndarray],
    k: int,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The cost tables as float64 arrays, after the checks of ``k`` and of their number and shape."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if len(rel_cost) != len(pattern_edges):
        raise ValueError(f"{len(pattern_edges)} pattern edges but {len(rel_cost)} relation cost arrays")
    node_cost = [np.asarray(c, dtype=np.float64) for c in node_cost]
    rel_cost = [np.asarray(c, dtype=np.float64) for c in rel_cost]
    for p, c in enumerate(node_cost):
        if c.shape != (graph.num_nodes,):
            raise ValueError(f"node_cost[{p}] has shape {c.shape}, expected ({graph.num_nodes},)")
    return node_cost, rel_cost


def _step_costs(
    graph: LocalGraph, plan: list, node_cost: list[np.ndarray], rel_cost: list[np.ndarray], min_node: list[float]
) -> tuple[list[np.ndarray], list[float]]:
    """Per planned step, the cost of every adjacency row (relation + new node), computed once so
    an expansion only slices it; and ``rem[s]``, the cheapest possible cost of steps ``s..``
    (the X + Y part of the lower bound)."""
    step_cost = []
    rem = [0.0] * (len(plan) + 1)
    for i, _, v, new in plan:
        rc = rel_cost[i]
        if rc.shape[0] <= int(graph.nbr.size and graph.rel.max()):
            raise ValueError(f"rel_cost[{i}] has {rc.shape[0]} entries; the graph uses relation id {graph.rel.max()}")
        cost = rc[graph.rel] + (node_cost[v][graph.nbr] if new else 0.0)
        step_cost.append(cost)
    for s in range(len(plan) - 1, -1, -1):
        i, _, v, new = plan[s]
        rc = rel_cost[i]
        fin = rc[np.isfinite(rc)]
        step_min = (float(fin.min()) if fin.size else INF) + (min_node[v] if new else 0.0)
        rem[s] = rem[s + 1] + step_min
    return step_cost, rem


class _Search:
    """The DFS of one search: extends the partial mapping (``f`` pattern node -> graph node,
    ``used`` graph nodes, ``edges`` pattern edge -> graph edge) one planned step at a time, in
    place and undone on the way back; complete matches go to ``top``."""

    def __init__(
        self,
        graph: LocalGraph,
        plan: list,
        step_cost: list[np.ndarray],
        rem: list[float],
        node_cost: list[np.ndarray],
        rel_cost: list[np.ndarray],
        k: int,
        prune: bool,
        stats: SearchStats,
        max_partial: int | None,
    ):
        self.graph, self.plan, self.step_cost, self.rem = graph, plan, step_cost, rem
        self.node_cost, self.rel_cost = node_cost, rel_cost
        self.prune, self.stats, self.max_partial = prune, stats, max_partial
        self.top = _TopK(k)
        self.f = [-1] * len(node_cost)
        self.used: set[int] = set()
        self.edges = [-1] * len(rel_cost)

    def run(self, start: int) -> list[Match]:
        """Try every candidate of the start node (cheapest first when pruning) and expand it."""
        f, used, top, cost = self.f, self.used, self.top, self.node_cost[start]
        cand = np.nonzero(np.isfinite(cost))[0]
        if self.prune:
            cand = cand[np.argsort(cost[cand], kind="stable")]
        for w in cand.tolist():
            first = float(cost[w])
            if self.prune and first + self.rem[0] > top.limit:
                self.stats.pruned += 1
                break
            f[start] = w
            used.add(w)
            self.expand(0, first)
            used.discard(w)
            f[start] = -1
        return top.result()

    def _complete(self, dist: float) -> None:
        """A complete match: kept if it can enter the top k (its distance re-summed canonically)."""
        self.stats.complete += 1
        top = self.top
        if dist <= top.limit:  # else it cannot enter
            d = _distance(self.node_cost, self.rel_cost, self.graph.rels, self.f, self.edges)
            top.push(Match(d, tuple(self.edges), tuple(self.f)))

    def expand(self, s: int, dist: float) -> None:
        """Extend by step ``s`` every way its costs allow (cheapest first and bounded when pruning)."""
        stats = self.stats
        stats.partial_matches += 1
        if self.max_partial is not None and stats.partial_matches > self.max_partial:
            return
        if s == len(self.plan):
            self._complete(dist)
            return
        f, used, edges, prune, top = self.f, self.used, self.edges, self.prune, self.top
        ptr, nbr, eid = self.graph.ptr, self.graph.nbr, self.graph.edge
        i, u, v, new = self.plan[s]
        a, b = ptr[f[u]], ptr[f[u] + 1]
        cost = self.step_cost[s][a:b]
        ok = np.isfinite(cost)
        if not new:
            ok &= nbr[a:b] == f[v]
        rows = np.nonzero(ok)[0]
        if rows.size == 0:
            return
        if prune:
            rows = rows[np.argsort(cost[rows], kind="stable")]
        rest = self.rem[s + 1]
        for r in rows.tolist():
            c = cost[r]
            if prune and dist + c + rest > top.limit:
                stats.pruned += 1
                break
            w = int(nbr[a + r])
            e = int(eid[a + r])
            if not new and e in edges:  # parallel pattern edges need distinct graph edges
                continue
            if new:
                if w in used:
                    continue
                f[v] = w
                used.add(w)
            edges[i] = e
            self.expand(s + 1, dist + c)
            if new:
                used.discard(w)
                f[v] = -1
        edges[i] = -1


def topk_matches(
    graph: LocalGraph,
    pattern_edges: Sequence[tuple[int, int]],
    node_cost: Sequence[np.ndarray],
    rel_cost: Sequence[np.ndarray],
    k: int,
    prune: bool = True,
    stats: SearchStats | None = None,
    max_partial: int | None = None,
) -> list[Match]:
    """The ``k`` matches (distinct edge sets) of smallest distance, best first.

    ``pattern_edges``: (head, tail) pattern-node pairs; ``node_cost``: one ``[N]`` array per
    pattern node; ``rel_cost``: one array per pattern edge indexed by relation id.
    ``prune=False`` runs the plain Algorithm 1 (no bound, no greedy order), for comparison.
    ``max_partial`` stops a runaway search (the result is then not guaranteed exact and
    ``stats.partial_matches`` shows it).
    """
    costs, rcosts = _check_costs(graph, pattern_edges, node_cost, rel_cost, k)
    stats = stats if stats is not None else SearchStats()
    num_p = len(costs)
    n_cand = [int(np.isfinite(c).sum()) for c in costs]
    if min(n_cand) == 0 or graph.nbr.size == 0:
        return []
    min_node = [float(c[np.isfinite(c)].min()) for c in costs]
    # start from the pattern node with the fewest candidates (then the cheapest, then the first)
    start = min(range(num_p), key=lambda p: (n_cand[p], min_node[p], p))
    plan = _plan(pattern_edges, num_p, start)
    step_cost, rem = _step_costs(graph, plan, costs, rcosts, min_node)
    return _Search(graph, plan, step_cost, rem, costs, rcosts, k, prune, stats, max_partial).run(start)


def brute_force_matches(
    graph: LocalGraph,
    pattern_edges: Sequence[tuple[int, int]],
    node_cost: Sequence[np.ndarray],
    rel_cost: Sequence[np.ndarray],
    k: int,
) -> list[Match]:
    """Every injective node mapping x every choice of parallel edges, sorted; for tests only."""
    num_p = len(node_cost)
    between: dict[tuple[int, int], list[int]] = {}
    for e, (h, t) in enumerate(zip(graph.heads.tolist(), graph.tails.tolist())):
        if h != t:
            between.setdefault((h, t), []).append(e)
            between.setdefault((t, h), []).append(e)
    best: dict[frozenset, Match] = {}
    cands = [np.nonzero(np.isfinite(np.asarray(c, dtype=np.float64)))[0].tolist() for c in node_cost]
    for mapping in itertools.product(*cands):
        if len(set(mapping)) < num_p:
            continue
        options = []
        for i, (h, t) in enumerate(pattern_edges):
            opts = [e for e in between.get((mapping[h], mapping[t]), []) if math.isfinite(rel_cost[i][graph.rels[e]])]
            if not opts:
                break
            options.append(opts)
        else:
            for choice in itertools.product(*options):
                if len(set(choice)) < len(choice):
                    continue
                d = _distance(node_cost, rel_cost, graph.rels, mapping, choice)
                m = Match(d, tuple(choice), tuple(mapping))
                if m.key not in best or d < best[m.key].distance:
                    best[m.key] = m
    return sorted(best.values(), key=lambda m: (m.distance, tuple(sorted(m.edges))))[:k]
