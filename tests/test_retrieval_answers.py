"""Answering with the retriever alone: candidates from a results row, scored like a reader."""

from __future__ import annotations

import pytest

from gsr_train.eval.retrieval_answers import answers_report, candidate_answers


def test_candidates_skip_topic_entities_in_rank_order():
    row = {"triples": [["Jamaica", "language", "Jamaican English"], ["Jamaica", "capital", "Kingston"], ["bad"]]}
    assert candidate_answers(row, ["Jamaica"]) == ["Jamaican English", "Kingston"]
    # an inverse triple (answer -> topic): its head is the candidate
    assert candidate_answers({"triples": [["Bob Marley", "born_in", "Jamaica"]]}, ["jamaica"]) == ["Bob Marley"]


def test_a_rows_own_answers_win_and_empty_rows_answer_nothing():
    row = {"triples": [["a", "r", "b"]], "answers": [{"name": "c", "prob": 0.9}, "d", {"name": "c"}]}
    assert candidate_answers(row) == ["c", "d"]
    assert candidate_answers(None) == [] and candidate_answers({"triples": []}) == []


def test_a_path_retriever_answers_with_where_its_paths_end():
    row = {
        "triples": [["Jamaica", "capital", "Kingston"]],  # ranked triples come after the paths
        "paths": [
            "Jamaica -> location.country.languages_spoken -> Jamaican English",
            "Jamaica <- people.person.nationality <- Bob Marley",  # stored (Bob Marley, nationality, Jamaica)
            "Jamaica -> location.country.languages_spoken -> Jamaican English",
            "Jamaica",  # a chain that ends where it starts (the topic): no candidate
        ],
    }
    assert candidate_answers(row, ["Jamaica"]) == ["Jamaican English", "Bob Marley"]
    assert candidate_answers({**row, "paths": ["Jamaica"]}, ["Jamaica"]) == ["Kingston"]  # paths give none


def test_answers_report_scores_the_top_candidate():
    questions = [
        {"id": "q1", "answers": ["Jamaican English"], "in_kg": True, "hops": 1},
        {"id": "q2", "answers": ["Oslo"], "in_kg": True, "hops": 1},
        {"id": "q3", "answers": ["x"], "in_kg": False, "hops": -1},  # no evidence row: no answer
    ]
    rows = {
        "q1": {"triples": [["Jamaica", "language", "Jamaican English"]]},
        "q2": {"triples": [["Norway", "city", "Bergen"], ["Norway", "capital", "Oslo"]]},
    }
    rep = answers_report(questions, rows, {"q1": ["Jamaica"], "q2": ["Norway"]}, n=1)
    assert rep.summary["all"]["n"] == 3
    assert rep.flat()["hit@1"] == pytest.approx(1 / 3)
    two = answers_report(questions, rows, {"q1": ["Jamaica"], "q2": ["Norway"]}, n=2)
    assert two.flat()["recall"] == pytest.approx(2 / 3)
