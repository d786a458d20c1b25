"""Classic retrievers: prizes, top-k triplets, greedy paths, PCST (connected, within budget), PPR."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import torch

from gsr_train.eval.results import read_results, write_results
from gsr_train.eval.retrieval import retrieval_metrics
from gsr_train.retrievers.classic import (
    classic_scores,
    masked_split,
    path_scores,
    rank_prizes,
    segment_rank,
    similarities,
    split_edge_prizes,
    triplet_scores,
)
from gsr_train.retrievers.pcst import pcst_question, solver
from gsr_train.retrievers.ppr import ppr_keep, ppr_scores
from gsr_train.text.embeddings import get_embeddings
from gsr_train.text.encoders import HashingEncoder
from tests.robustness_helpers import toy_index


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("classic")
    index = toy_index(tmp, n_questions=4, n_entities=30, n_edges=80)
    emb = get_embeddings(index, HashingEncoder(dim=32), tmp / "cache")
    return index, index["test"], emb


def _connected(edges: list[tuple[int, int]]) -> bool:
    g = nx.Graph()
    g.add_edges_from(edges)
    return g.number_of_edges() == 0 or nx.is_connected(g)


def test_segment_rank_and_rank_prizes():
    vals = torch.tensor([0.1, 0.9, 0.5, 0.5, 0.3, 0.7])
    ptr = torch.tensor([0, 4, 6])
    assert segment_rank(vals, ptr).tolist() == [3, 0, 1, 2, 1, 0]
    assert rank_prizes(vals, ptr, 2).tolist() == [0, 2, 1, 0, 1, 2]
    eligible = torch.tensor([True, False, True, True, True, True])
    assert rank_prizes(vals, ptr, 2, eligible).tolist() == [0, 0, 2, 1, 1, 2]


def test_split_edge_prizes_share_ties_and_decrease(toy):
    _, split, emb = toy
    _, _, edge_sim = similarities(split, emb.question["test"], emb)
    prize = split_edge_prizes(split, edge_sim, k=5)
    for q in range(len(split)):
        e0, e1 = int(split.edge_ptr[q]), int(split.edge_ptr[q + 1])
        rel, p = split.edge_rel[e0:e1], prize[e0:e1]
        per_rel = {}
        for r, v in zip(rel.tolist(), p.tolist()):
            per_rel.setdefault(r, set()).add(round(v, 6))
        assert all(len(v) == 1 for v in per_rel.values())  # one prize per relation (ties share)
        sims = {r: float(edge_sim[e0:e1][rel == r][0]) for r in per_rel}
        ranked = sorted(per_rel, key=lambda r: -sims[r])
        edge_prize = [next(iter(per_rel[r])) for r in ranked[:5]]
        assert all(a > b for a, b in zip(edge_prize, edge_prize[1:]))  # strictly decreasing per edge
        totals = [next(iter(per_rel[r])) * int((rel == r).sum()) for r in ranked[:5]]
        assert all(t <= 5 - j + 1e-4 for j, t in enumerate(totals)), (totals, edge_prize)  # rank j shares <= k - j
        assert all(next(iter(per_rel[r])) == 0 for r in ranked[5:])


def test_triplets_total_prize(toy):
    _, split, emb = toy
    node_sim, has_text, edge_sim = similarities(split, emb.question["test"], emb)
    npz = rank_prizes(node_sim, split.ent_ptr, 10, has_text)
    epz = rank_prizes(edge_sim, split.edge_ptr, 10)
    s = classic_scores(split, emb.question["test"], emb, "triplets")
    assert torch.allclose(s, triplet_scores(split, npz, epz, node_sim, edge_sim))
    g = split.graph(1)
    e0, n0 = int(split.edge_ptr[1]), int(split.ent_ptr[1])
    h, t = int(g.edge_index[0, 3]) + n0, int(g.edge_index[1, 3]) + n0
    want = npz[h] + epz[e0 + 3] + npz[t] + 1e-3 * (node_sim[h] + edge_sim[e0 + 3] + node_sim[t])
    assert float(s[e0 + 3]) == pytest.approx(float(want), abs=1e-5)


def test_paths_find_the_best_path_by_brute_force():
    """On a small graph with a wide beam, the first retrieved path is the best simple path."""
    from gsr_train.kg.index import SplitGraphs

    rng = np.random.default_rng(0)
    n, edges = 9, set()
    while len(edges) < 16:
        a, b = rng.choice(n, 2, replace=False)
        edges.add((int(a), int(b)))
    edges = sorted(edges)
    ei = torch.tensor(edges).T
    split = SplitGraphs(
        ["q"],
        ["q"],
        [[]],
        torch.tensor([0, n]),
        torch.arange(n),
        torch.zeros(n, dtype=torch.bool),
        torch.zeros(n, dtype=torch.bool),
        torch.tensor([0, len(edges)]),
        ei,
        torch.zeros(len(edges), dtype=torch.long),
    )
    node_value = torch.tensor(rng.uniform(0, 3, n), dtype=torch.float32)
    edge_value = torch.tensor(rng.uniform(-1, 1, len(edges)), dtype=torch.float32)
    start = torch.zeros(n, dtype=torch.bool)
    start[[0, 4]] = True
    s = path_scores(split, node_value, edge_value, start, max_len=3, beam=1000, max_paths=1)
    best, best_edges = -math.inf, None

    def walk(node, visited, eids, score):
        nonlocal best, best_edges
        if eids and score > best:
            best, best_edges = score, list(eids)
        if len(eids) == 3:
            return
        for e, (a, b) in enumerate(edges):
            for u, v in ((a, b), (b, a)):
                if u == node and v not in visited:
                    walk(v, visited | {v}, eids + [e], score + float(edge_value[e]) + float(node_value[v]))

    for st in (0, 4):
        walk(st, {st}, [], float(node_value[st]))
    got = (s > -math.inf).nonzero().flatten().tolist()
    assert sorted(got) == sorted(best_edges)
    assert [int(x) for x in torch.argsort(-s)[: len(best_edges)]] == best_edges  # path order


def test_pcst_solver_and_connected_within_budget(toy):
    solver()  # the installed pcst_fast passes its self-check
    _, split, emb = toy
    for budget in (3, 8, 200):
        s = classic_scores(split, emb.question["test"], emb, "pcst", {"pcst": {"budget": budget, "edge_cost": 0.05}})
        sizes = []
        for q in range(len(split)):
            e0, e1 = int(split.edge_ptr[q]), int(split.edge_ptr[q + 1])
            sq = s[e0:e1]
            order = torch.argsort(-sq)[: int((sq > -math.inf).sum())].tolist()
            ei = split.edge_index[:, e0:e1]
            pairs = [(int(ei[0, e]), int(ei[1, e])) for e in order]
            assert len(pairs) <= budget
            for k in range(1, len(pairs) + 1):  # every top-k prefix is connected
                assert _connected(pairs[:k])
            sizes.append(len(pairs))
        assert max(sizes) > 1
    assert max(sizes) > 3


def test_pcst_question_collects_prizes():
    """Two prized nodes joined by a cheap path are connected; a far, costly prize is not."""
    heads = np.array([0, 1, 2, 3, 4])
    tails = np.array([1, 2, 3, 4, 5])
    node_prize = np.array([5.0, 0, 0, 5.0, 0, 0.1])
    edge_prize = np.zeros(5)
    picked = pcst_question(6, heads, tails, node_prize, edge_prize, edge_cost=0.5)
    assert sorted(picked) == [0, 1, 2]
    assert pcst_question(6, heads, tails, node_prize, edge_prize, 0.5, budget=2) in ([0, 1], [2, 1])


def test_ppr_and_pruning(toy):
    _, split, emb = toy
    p = ppr_scores(split)
    node_q = torch.repeat_interleave(torch.arange(len(split)), split.num_entities)
    sums = torch.zeros(len(split)).index_add_(0, node_q, p)
    assert torch.allclose(sums, torch.ones(len(split)), atol=1e-4)
    for q in range(len(split)):
        n0, n1 = int(split.ent_ptr[q]), int(split.ent_ptr[q + 1])
        assert int(torch.argmax(p[n0:n1])) == int(split.topic_mask[n0:n1].nonzero()[0])
    keep = ppr_keep(split, top_nodes=8)
    sub, origin = masked_split(split, keep)
    assert 0 < int(keep.sum()) < keep.numel()
    assert torch.equal(sub.global_edges(), split.global_edges()[origin])
    s = classic_scores(split, emb.question["test"], emb, "triplets", {"ppr": {"enabled": True, "top_nodes": 8}})
    assert torch.equal(s > -math.inf, keep)


def test_results_format_round_trip_and_metrics(toy, tmp_path):
    index, split, emb = toy
    for method in ("triplets", "paths", "pcst"):
        s = classic_scores(split, emb.question["test"], emb, method)
        report = retrieval_metrics(split, s, [5, 50])
        assert 0.0 <= report.overall["answer_recall"][50] <= 1.0
        path = tmp_path / f"{method}.jsonl"
        write_results(path, index, "test", s, 500)
        back, _ = read_results(path, index, "test")
        assert torch.equal(back > -math.inf, s > -math.inf)
        assert retrieval_metrics(split, back, [5, 50]).overall == report.overall
    with pytest.raises(ValueError, match="classic method"):
        classic_scores(split, emb.question["test"], emb, "bfs")
    with pytest.raises(ValueError, match="unknown classic.pcst options"):
        classic_scores(split, emb.question["test"], emb, "pcst", {"pcst": {"budjet": 3}})
