"""Facts against the KG: calibration facts, the encoder verifier, AUC / threshold, FActScore."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from gsr_train.eval.fact_check import (
    EncoderVerifier,
    auc,
    calibrate,
    calibration_facts,
    closest_lines,
    fact_sentence,
    factscore,
    graph_lines,
    triple_line,
)


def test_auc_is_the_chance_a_true_fact_outscores_a_false_one():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 40).astype(float)  # many ties
    labels = rng.integers(0, 2, 40)
    pairs = [
        1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(scores[labels == 1], scores[labels == 0])
    ]
    assert auc(scores, labels) == pytest.approx(np.mean(pairs))
    assert auc([0.1, 0.9], [0, 1]) == 1.0 and auc([0.5, 0.5], [1, 1]) is None


def test_calibration_finds_the_threshold_with_the_best_accuracy():
    cal = calibrate([0.2, 0.4, 0.6, 0.8, 0.7], [0, 0, 1, 1, 0])
    assert (
        cal["threshold"] == 0.6 and cal["accuracy"] == 0.8
    )  # the lowest of equally good thresholds and cal["auc"] == pytest.approx(5 / 6)
    with pytest.raises(ValueError, match="at least one"):
        calibrate([], [])


def test_factscore_penalises_short_answers_and_counts_answers_without_facts():
    figures = factscore([[True, False], [True] * 10, []], gamma=10)
    short = 0.5 * math.exp(1 - 10 / 2)
    assert figures["factscore"] == pytest.approx((short + 1.0) / 2)
    assert figures["factscore_no_penalty"] == pytest.approx(0.75)
    assert figures["hallucination_ratio"] == pytest.approx(1 / 12)
    assert figures["answers"] == 2 and figures["answers_without_facts"] == 1 and figures["facts"] == 12
    assert factscore([[]])["factscore"] is None and factscore([[False]], gamma=0)["factscore"] == 0.0


def test_calibration_facts_are_triples_of_the_graph_or_provably_not(webqsp_mini, tmp_path):
    from gsr_train.kg.index import get_index

    index = get_index(str(webqsp_mini), splits=("test",), cache_dir=tmp_path)
    split = index["test"]
    facts = calibration_facts(split, index.entities, index.relations, per_question=2, seed=1)
    assert facts == calibration_facts(split, index.entities, index.relations, per_question=2, seed=1)
    kinds = {f.kind for f in facts}
    assert kinds == {"true", "relation_swapped", "entity_replaced"}
    truths = [f for f in facts if f.label == 1]
    assert 300 < len(truths) <= 2 * len(split) and all(f.kind == "true" for f in truths)
    # a true fact restates a line of its question's graph; a false one restates none
    for f in facts[:60]:
        g = split.graph(f.question)
        name = [index.entities[int(e)] for e in g.entity_ids.tolist()]
        triples = zip(g.edge_index[0].tolist(), g.edge_rel.tolist(), g.edge_index[1].tolist())
        restated = {fact_sentence(name[h], index.relations[r], name[t]) for h, r, t in triples}
        assert (f.text in restated) == bool(f.label), f
    about = graph_lines(split, facts[0].question, index.entities, index.relations, about=[facts[0].about])
    head = index.entities[int(split.graph(facts[0].question).entity_ids[facts[0].about])]
    assert about and all(head in line for line in about)


def test_the_encoder_verifier_scores_the_closest_line():
    from gsr_train.text.encoders import HashingEncoder

    verifier = EncoderVerifier(HashingEncoder(dim=64), candidates=2)
    line = triple_line("Jamaica", "location.country.languages_spoken", "Jamaican English")
    scores = verifier.support([line, "anything at all", line], [[line, "(a, b, c)"], [], ["(x, y, z)"]])
    assert scores[0] == pytest.approx(1.0) and scores[1] == -1.0 and scores[2] < 0.99
    assert closest_lines("Jamaica languages", ["(a, b, c)", "(Jamaica, languages, x)", "(d, e, f)"], 1) == [
        "(Jamaica, languages, x)"
    ]
    with pytest.raises(ValueError, match="2 facts but 1 knowledge sources"):
        verifier.support(["a", "b"], [["c"]])
