"""OKGQA-P perturbations: exact fractions, well-formed graphs, protected gold edges, reproducibility."""

from __future__ import annotations

import pytest
import torch

from gsr_train.kg.paths import build_supervision
from gsr_train.robustness.kge import train_scorer
from gsr_train.robustness.perturb import METHODS, check_well_formed, perturb, requested_counts, rewirable
from tests.robustness_helpers import SHARED, per_question, toy_index, triples_of, undirected_neighbours

LEVELS = (0.2, 0.4, 0.6, 0.8, 1.0)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    index = toy_index(tmp_path_factory.mktemp("perturb"), n_questions=4, n_entities=25, n_edges=70)
    split = index["test"]
    scorer = train_scorer(split, len(index.relations), {"epochs": 3, "dim": 16})
    return index, split, scorer


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("level", LEVELS)
def test_exact_fraction_and_well_formed(toy, method, level):
    index, split, scorer = toy
    p = perturb(split, method, level, seed=3, scorer=scorer)
    want = requested_counts(split, level)
    assert torch.equal(want, torch.floor(split.num_edges * level + 0.5).long())
    assert torch.equal(per_question(p.touched, split), want)
    assert torch.equal(per_question(p.changed, split), want)  # every chosen edge really changed
    check_well_formed(p.split, len(index.relations))
    for name in ("ent_ptr", "entity_ids", "topic_mask", "answer_mask"):
        assert torch.equal(getattr(p.split, name), getattr(split, name))
    if method == "delete":
        assert torch.equal(p.split.num_edges, split.num_edges - want)
        assert torch.equal(p.split.global_edges(), split.global_edges()[p.origin])
    else:
        assert torch.equal(p.split.edge_ptr, split.edge_ptr)
        same = (p.split.global_edges() == split.global_edges()).all(1)
        assert torch.equal(~same, p.changed)


def test_swap_keeps_relation_multiset(toy):
    _, split, _ = toy
    p = perturb(split, "swap", 0.6, seed=1)
    for q in range(len(split)):
        a, b = split.graph(q).edge_rel, p.split.graph(q).edge_rel
        assert torch.equal(torch.sort(a).values, torch.sort(b).values)
    assert torch.equal(p.split.edge_index, split.edge_index)


def test_rewire_leaves_one_hop_neighbourhood(toy):
    _, split, _ = toy
    p = perturb(split, "rewire", 1.0, seed=2)
    for q in range(len(split)):
        nb = undirected_neighbours(split, q)
        e0 = int(split.edge_ptr[q])
        for i, ((h, r, _), (h2, r2, t2)) in enumerate(zip(triples_of(split, q), triples_of(p.split, q))):
            assert (h, r) == (h2, r2)
            if bool(p.changed[e0 + i]):
                assert t2 != h and t2 not in nb[h]


def test_replace_picks_least_plausible_relation(toy):
    _, split, scorer = toy
    p = perturb(split, "replace", 0.4, seed=0, scorer=scorer)
    orig, new = split.global_edges(), p.split.global_edges()
    rels = scorer.known_relations
    for e in p.changed.nonzero().flatten()[:15].tolist():
        h, r, t = orig[e].tolist()
        n = rels.numel()
        logits = scorer.logits(torch.full((n,), h), rels, torch.full((n,), t))
        logits[rels == r] = float("inf")
        assert int(new[e, 1]) == int(rels[int(logits.argmin())]) != r


def test_nested_levels_and_reproducible(toy):
    _, split, _ = toy
    prev = torch.zeros(split.edge_rel.numel(), dtype=torch.bool)
    for level in LEVELS:
        p = perturb(split, "delete", level, seed=5)
        assert bool((p.touched | ~prev).all())  # every edge chosen at a lower level stays chosen
        prev = p.touched
    a, b = perturb(split, "swap", 0.4, seed=9), perturb(split, "swap", 0.4, seed=9)
    assert torch.equal(a.split.edge_rel, b.split.edge_rel)
    assert not torch.equal(a.touched, perturb(split, "swap", 0.4, seed=10).touched)


@pytest.mark.parametrize("method", METHODS)
def test_protected_gold_edges_untouched(toy, method):
    _, split, scorer = toy
    gold = build_supervision(split).triple_label
    assert int(gold.sum()) > 0
    for level in (0.4, 1.0):
        p = perturb(split, method, level, seed=4, protect=gold, scorer=scorer)
        assert not bool((p.touched & gold).any()) and not bool((p.changed & gold).any())
        assert not bool(p.questions_touched(gold, split).any())
        want = torch.minimum(requested_counts(split, level), split.num_edges - per_question(gold, split))
        assert torch.equal(per_question(p.changed, split), want)
        surviving = p.surviving(gold)
        assert int(surviving.sum()) == int(gold.sum())  # every gold edge is still there, unchanged
        assert torch.equal(p.split.global_edges()[surviving], split.global_edges()[gold])


def test_bad_arguments(toy):
    _, split, _ = toy
    with pytest.raises(ValueError, match="method"):
        perturb(split, "shuffle", 0.2)
    with pytest.raises(ValueError, match="level"):
        perturb(split, "delete", 1.5)
    with pytest.raises(ValueError, match="scorer"):
        perturb(split, "replace", 0.2)
    with pytest.raises(ValueError, match="one value per edge"):
        perturb(split, "delete", 0.2, protect=torch.zeros(3, dtype=torch.bool))


def test_real_fixture_fractions_and_protection(tmp_path):
    if not (SHARED / "webqsp_mini" / "test.jsonl.gz").exists():
        pytest.skip(f"shared fixtures not found at {SHARED}")
    from gsr_train.kg.index import get_index

    index = get_index(SHARED / "webqsp_mini", ("test",), tmp_path)
    split = index["test"].subset(range(12))
    gold = build_supervision(split).triple_label
    for method in ("swap", "rewire", "delete"):
        p = perturb(split, method, 0.4, seed=0, protect=gold)
        check_well_formed(p.split, len(index.relations))
        assert not bool((p.changed & gold).any())
        free = ~gold if method != "rewire" else ~gold & rewirable(split)  # hub heads cannot be rewired
        want = torch.minimum(requested_counts(split, 0.4), per_question(free, split))
        assert torch.equal(per_question(p.touched, split), want)
        assert torch.equal(p.chosen_per_question, want)
        # swapping can leave an edge unchanged only when one relation holds most chosen edges
        assert int(p.changed.sum()) >= 0.9 * int(want.sum())
