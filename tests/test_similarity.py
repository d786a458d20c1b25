"""SC2D / SD2 / ATS: triangle counts against networkx, 1 for an unchanged graph, falling with the level."""

from __future__ import annotations

import random

import networkx as nx
import pytest
import torch

from gsr_train.robustness.kge import get_scorer, train_scorer
from gsr_train.robustness.perturb import perturb
from gsr_train.robustness.similarity import ats, relation_profiles, similarity, triangle_counts
from tests.robustness_helpers import toy_index


def test_triangle_counts_match_networkx():
    rng = random.Random(0)
    g = nx.gnm_random_graph(60, 400, seed=1)
    g.add_edges_from((0, v) for v in range(1, 60))  # a hub: many wedges
    pairs = sorted((min(a, b), max(a, b)) for a, b in g.edges())
    rng.shuffle(pairs)
    a = torch.tensor([p[0] for p in pairs])
    b = torch.tensor([p[1] for p in pairs])
    want = nx.triangles(g)
    import gsr_train.robustness.similarity as sim

    for chunk in (1 << 22, 7):  # one chunk, and many tiny chunks
        old, sim.WEDGE_CHUNK = sim.WEDGE_CHUNK, chunk
        try:
            got = triangle_counts(a, b, 60)
        finally:
            sim.WEDGE_CHUNK = old
        assert got.tolist() == [want[i] for i in range(60)]


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """Dense graphs over few relations: many triangles per relation, so SC2D is informative."""
    index = toy_index(
        tmp_path_factory.mktemp("sim"), n_questions=3, n_entities=14, n_edges=70, relations=["r.a", "r.b", "r.c"]
    )
    return index, index["test"]


def test_profiles_match_networkx_definition(dense):
    index, split = dense
    c, d = relation_profiles(split)
    for q in range(len(split)):
        g = split.graph(q)
        n0, n = int(split.ent_ptr[q]), g.num_entities
        rels = sorted(set(g.edge_rel.tolist()))
        c_want = torch.zeros(n, dtype=torch.float64)
        d_want = torch.zeros(n, dtype=torch.float64)
        for r in rels:
            sub = nx.Graph()
            sub.add_nodes_from(range(n))
            sel = g.edge_rel == r
            sub.add_edges_from((h, t) for h, t in g.edge_index[:, sel].T.tolist() if h != t)
            cl = nx.clustering(sub)
            c_want += torch.tensor([cl[i] for i in range(n)], dtype=torch.float64)
            for h, t in g.edge_index[:, sel].T.tolist():
                d_want[h] += 1
                d_want[t] += 1
        assert torch.allclose(c[n0 : n0 + n], c_want / len(rels))
        assert torch.allclose(d[n0 : n0 + n], d_want / len(rels))


def test_one_for_unperturbed_and_falling_with_level(dense):
    _, split = dense
    same = similarity(split, split)
    assert same.sc2d == 1.0 and same.sd2 == 1.0
    assert similarity(split, perturb(split, "swap", 0.0, seed=0).split).sc2d == 1.0
    for method, metrics in (("delete", ("sc2d", "sd2")), ("rewire", ("sc2d", "sd2"))):
        values = [similarity(split, perturb(split, method, lv, seed=0).split) for lv in (0.2, 0.6, 1.0)]
        for m in metrics:
            series = [getattr(v, m) for v in values]
            assert 1.0 > series[0] > series[-1], (method, m, series)
            assert series[0] >= series[1] - 1e-3 and series[1] >= series[2] - 1e-3, (method, m, series)
    # a full relation swap of a random graph is another random labelling: SC2D drops, but not monotonically
    assert all(similarity(split, perturb(split, "swap", lv, seed=0).split).sc2d < 1.0 for lv in (0.2, 1.0))
    # relation swapping keeps every entity's total degree and the relation count: the paper's SD2 cannot see it
    assert similarity(split, perturb(split, "swap", 1.0, seed=0).split).sd2 == pytest.approx(1.0)


def test_ats_falls_under_replacement_and_cache(tmp_path, dense):
    index, split = dense
    cfg = {"epochs": 30, "dim": 16, "lr": 0.05}
    scorer = get_scorer(split, len(index.relations), cfg, tmp_path)
    again = get_scorer(split, len(index.relations), cfg, tmp_path)  # from the cache
    trip = split.global_edges()
    assert torch.allclose(
        scorer.logits(trip[:, 0], trip[:, 1], trip[:, 2]), again.logits(trip[:, 0], trip[:, 1], trip[:, 2])
    )
    assert len(list((tmp_path / "kge").iterdir())) == 1
    base = ats(scorer, split)
    replaced = ats(scorer, perturb(split, "replace", 1.0, seed=0, scorer=scorer).split)
    assert 0.0 <= replaced < base <= 1.0
    assert ats(scorer, perturb(split, "delete", 1.0, seed=0).split) == 0.0
    with pytest.raises(ValueError, match="torch_geometric"):
        train_scorer(split, len(index.relations), {"model": "NotAModel"})
