"""The exact top-k pattern search equals brute force, and pruning visits fewer partial matches."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gsr_train.patterns.search import LocalGraph, SearchStats, brute_force_matches, topk_matches

SHAPES = {
    "edge": [(0, 1)],
    "path2": [(0, 1), (1, 2)],
    "path3": [(0, 1), (1, 2), (2, 3)],
    "star": [(0, 1), (0, 2), (0, 3)],
    "triangle": [(0, 1), (1, 2), (2, 0)],
    "parallel": [(0, 1), (0, 1)],
}


def _random_case(rng: np.random.Generator, shape: str, num_nodes: int = 9, num_edges: int = 22, num_rel: int = 4):
    heads = rng.integers(0, num_nodes, num_edges)
    tails = rng.integers(0, num_nodes, num_edges)
    rels = rng.integers(0, num_rel, num_edges)
    graph = LocalGraph.from_edges(np.stack([heads, tails]), rels, num_nodes)
    pedges = SHAPES[shape]
    num_p = max(max(e) for e in pedges) + 1
    node_cost = []
    for _ in range(num_p):
        kind = rng.integers(0, 3)
        if kind == 0:  # unknown: every node, cost 0
            node_cost.append(np.zeros(num_nodes))
        else:  # known: random distances, some nodes not candidates
            c = rng.random(num_nodes)
            c[rng.random(num_nodes) < (0.3 if kind == 1 else 0.0)] = math.inf
            node_cost.append(c)
    rel_cost = []
    for _ in pedges:
        if rng.random() < 0.3:
            rel_cost.append(np.zeros(num_rel))
        else:
            c = rng.random(num_rel)
            c[rng.random(num_rel) < 0.25] = math.inf
            rel_cost.append(c)
    return graph, pedges, node_cost, rel_cost


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_search_equals_brute_force(shape):
    rng = np.random.default_rng(hash(shape) % 1000)
    nonempty = 0
    for trial in range(25):
        graph, pedges, node_cost, rel_cost = _random_case(rng, shape)
        brute = brute_force_matches(graph, pedges, node_cost, rel_cost, k=10**9)
        for k in (1, 3, 10):
            for prune in (True, False):
                got = topk_matches(graph, pedges, node_cost, rel_cost, k, prune=prune)
                want = brute[:k]
                assert [m.distance for m in got] == pytest.approx([m.distance for m in want]), (shape, trial, k, prune)
                assert [m.key for m in got] == [m.key for m in want], (shape, trial, k, prune)
                # a reported match is real: its edges join its nodes and the distance adds up
                for m in got:
                    d = sum(node_cost[p][v] for p, v in enumerate(m.nodes))
                    for i, e in enumerate(m.edges):
                        h, t = pedges[i]
                        assert {graph.heads[e], graph.tails[e]} == {m.nodes[h], m.nodes[t]}
                        d += rel_cost[i][graph.rels[e]]
                    assert d == pytest.approx(m.distance)
                    assert len(set(m.nodes)) == len(m.nodes)
        nonempty += bool(brute)
    assert nonempty >= 10, "the random cases should mostly have matches"


def test_pruning_visits_fewer_partial_matches():
    rng = np.random.default_rng(7)
    fewer = 0
    for _ in range(8):
        graph, pedges, node_cost, rel_cost = _random_case(rng, "path3", num_nodes=40, num_edges=300, num_rel=6)
        node_cost[0] = rng.random(40)  # a known start with real distances
        plain, pruned = SearchStats(), SearchStats()
        a = topk_matches(graph, pedges, node_cost, rel_cost, 3, prune=False, stats=plain)
        b = topk_matches(graph, pedges, node_cost, rel_cost, 3, prune=True, stats=pruned)
        assert [m.distance for m in a] == pytest.approx([m.distance for m in b])
        assert pruned.partial_matches <= plain.partial_matches
        fewer += pruned.partial_matches < plain.partial_matches / 2
    assert fewer >= 6, "pruning + greedy order should cut most of the search"


def test_no_candidates_and_bad_input():
    graph = LocalGraph.from_edges(np.array([[0], [1]]), np.array([0]), 2)
    assert topk_matches(graph, [(0, 1)], [np.full(2, math.inf), np.zeros(2)], [np.zeros(1)], 5) == []
    with pytest.raises(ValueError, match="node_cost"):
        topk_matches(graph, [(0, 1)], [np.zeros(3), np.zeros(2)], [np.zeros(1)], 5)
    with pytest.raises(ValueError, match="k must be"):
        topk_matches(graph, [(0, 1)], [np.zeros(2), np.zeros(2)], [np.zeros(1)], 0)
