"""QA metrics against hand-computed cases (Hit, Hit@1, F1 variants, precision, recall, Score_h)."""

from __future__ import annotations

import pytest

from gsr_train.eval.qa import QAExample, comparison_table, contains_answer, normalize_answer, qa_metrics, score_question
from gsr_train.readers.prompts import parse_response


def test_normalize_answer():
    assert normalize_answer("  The Beatles!! ") == "beatles"
    assert normalize_answer("An Apple, a day") == "apple day"
    assert normalize_answer("Martin Luther King, Jr.") == "martin luther king jr"
    assert normalize_answer("ＰＡＲＩＳ") == "paris"  # NFKC full-width
    assert contains_answer("Answer: the Beatles.", "Beatles")
    assert not contains_answer("Parisian cafes", "Paris")
    assert not contains_answer("anything", "")


CASES = [
    # in the KG: one right, one wrong -> P .5, R .5, F1 .5, hit, hit@1, h = (1 - 1) / 2 = 0
    QAExample("a", ["paris", "Berlin"], ["Paris", "London"], "paris\nBerlin", True, 1),
    # in the KG, nothing predicted: all 0, h = 0 (missing)
    QAExample("b", [], ["The Beatles"], "I do not know", True, 2),
    # answer absent from the KG: one answer among the retrieved entities (-1), one not (-1.5)
    QAExample("c", ["Alpha", "Beta"], ["X"], "Alpha\nBeta", False, -1, retrieved_entities=["alpha", "Gamma"]),
    # answer absent, no answer given: +1
    QAExample("d", [], ["Y"], "", False, -1),
]


def test_per_question_values():
    a, b, c, d = (score_question(x) for x in CASES)
    assert (a["precision"], a["recall"], a["f1"], a["hit"], a["hit@1"], a["h"]) == (0.5, 0.5, 0.5, 1.0, 1.0, 0.0)
    assert (b["precision"], b["recall"], b["f1"], b["hit"], b["hit@1"], b["h"]) == (0, 0, 0, 0, 0, 0)
    assert c["h"] == pytest.approx(-1.25) and c["precision"] == 0 and c["hit"] == 0
    assert d["h"] == 1.0
    # duplicates after normalisation count once; Hit@1 looks at the first answer only
    e = score_question(QAExample("e", ["Rome", "the Paris", "Paris."], ["Paris"], "", True))
    assert (e["n_pred"], e["precision"], e["recall"], e["hit@1"], e["hit"]) == (2, 0.5, 1.0, 0.0, 1.0)


def test_aggregates_full_and_sub_and_hops():
    rep = qa_metrics(CASES)
    m = rep.flat("all")
    assert m["macro_f1"] == pytest.approx(0.125)  # (0.5 + 0 + 0 + 0) / 4
    # micro: 1 correct of 4 predicted, 1 found of 5 gold -> P .25, R .2, F1 = 2*.05/.45
    assert m["micro_f1"] == pytest.approx(2 * 0.25 * 0.2 / 0.45)
    assert m["precision"] == pytest.approx(0.125) and m["recall"] == pytest.approx(0.125)
    assert m["hit"] == 0.25 and m["hit@1"] == 0.25
    # mean h = (0 + 0 - 1.25 + 1) / 4 = -0.0625; bounds: worst = mean(-1, -1, -1.5, -1.5) = -1.25, best = 1
    assert m["score_h"] == pytest.approx(100 * (-0.0625 + 1.25) / 2.25)
    sub = rep.to_dict()["sub"]
    assert sub["n"] == 2 and sub["metrics"]["score_h"] == pytest.approx(50.0)  # mean h 0 in [-1, 1]
    assert sub["metrics"]["macro_f1"] == pytest.approx(0.25)
    assert rep.to_dict()["hop=-1"]["n"] == 2 and rep.to_dict()["hop=1"]["metrics"]["hit"] == 1.0
    assert "score_h" in rep.table() and "hop=2" in rep.table()
    assert "x" in comparison_table({"x": rep})


def test_perfect_and_worst_score_h():
    best = qa_metrics([QAExample("a", ["Paris"], ["Paris"], "", True), QAExample("b", [], ["Q"], "", False)])
    assert best.flat()["score_h"] == pytest.approx(100.0) and best.flat()["macro_f1"] == 0.5
    worst = qa_metrics([QAExample("a", ["Rome"], ["Paris"], "", True), QAExample("b", ["Z"], ["Q"], "", False)])
    assert worst.flat()["score_h"] == pytest.approx(0.0)


def test_parse_response_formats():
    text = "We look at the triples.\nans: Paris\nans: paris.\n- ans: London\nans: not available"
    assert parse_response(text, "subgraphrag") == ["Paris", "London"]
    assert parse_response("no prefixed line", "subgraphrag") == []
    assert parse_response("1. Paris\n- London\n\nThe answers are:\nNone", "triples") == ["Paris", "London"]
    assert parse_response("Jamaican English\nJamaican English", "paths") == ["Jamaican English"]
