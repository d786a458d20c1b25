"""The judges' answers read, and every unreadable one named by its reason (never scored 0 or 1)."""

from __future__ import annotations

import math

import pytest

from gsr_train.openended.parsing import parse_facts, parse_rating, parse_verdict
from gsr_train.openended.stages import sentences


def _body(pairs):
    tops = [{"token": t, "logprob": math.log(p)} for t, p in pairs]
    return {
        "choices": [
            {"logprobs": {"content": [{"token": pairs[0][0], "logprob": tops[0]["logprob"], "top_logprobs": tops}]}}
        ]
    }


def test_fact_lists():
    assert parse_facts("- Nixon was a lawyer.\n- Nixon was born in Yorba Linda.", 10) == (
        ["Nixon was a lawyer.", "Nixon was born in Yorba Linda."],
        None,
        0,
    )
    assert parse_facts('["Nixon was a lawyer.", "short"]', 10) == (["Nixon was a lawyer."], None, 1)
    assert parse_facts("1. Nixon was a lawyer.\n2) Nixon was a lawyer.\n3. Nixon was president.", 1) == (
        ["Nixon was a lawyer."],
        None,
        2,  # one repeat dropped, one over max_facts
    )
    assert parse_facts("Here they are: Nixon was a lawyer.", 10) == ([], "unparseable_facts", 0)
    assert parse_facts("   ", 10) == ([], "empty_fact_list", 0)
    assert parse_facts(None, 10) == ([], "empty_fact_list", 0)
    assert parse_facts("- yes\n- no", 10) == ([], "no_facts", 2)


def test_sentences_drop_the_unfinished_and_the_repeated():
    text = "Nixon was a lawyer. He was president! Nixon was a lawyer. He was a former US Pres"
    assert sentences(text) == ["Nixon was a lawyer.", "He was president!"]
    assert sentences("no full stop here") == []


def test_verdicts_from_text_and_from_logprobs():
    assert parse_verdict("True").value == 1.0 and parse_verdict("False.").value == 0.0
    assert parse_verdict("Answer: True").value == 1.0
    assert parse_verdict("Not supported").value == 0.0
    assert parse_verdict("Maybe, it depends").reason == "no_verdict"
    assert parse_verdict("").reason == "empty_verdict"
    p = parse_verdict("True", _body([("True", 0.6), ("False", 0.2), ("Maybe", 0.2)]))
    assert p.method == "logprobs" and p.value == pytest.approx(0.75)
    # log-probabilities without a verdict token: the text decides
    assert parse_verdict("False", _body([("Hmm", 0.9)])).value == 0.0


def test_ratings_weighted_by_probability_or_read():
    p = parse_rating("4", _body([("4", 0.5), ("5", 0.25), ("x", 0.25)]))
    assert p.method == "logprobs" and p.value == pytest.approx((4 * 0.5 + 5 * 0.25) / 0.75)
    assert parse_rating("3").value == 3.0 and parse_rating("Rating: 4/5").value == 4.0
    assert parse_rating('{"rating": 2}').value == 2.0
    assert parse_rating('{"rating": 2').reason == "malformed_json"
    assert parse_rating('{"score": 9}').reason == "malformed_json"
    assert parse_rating("7").reason == "no_rating" and parse_rating("great answer").reason == "no_rating"
    assert parse_rating("").reason == "empty_rating"


def test_geval_samples_every_item_when_the_endpoint_returns_no_logprobs(tmp_path):
    """``auto`` probes with one request; an endpoint without log-probabilities gets samples only."""
    from gsr_train.llm.client import ChatClient
    from gsr_train.llm.server import ScriptedBackend, serve_in_thread
    from gsr_train.openended.stages import Case, GEvalOptions, geval

    cases = [Case(f"q{i}|none", "What about X?", [], answer=f"X is Y{i}.") for i in range(3)]
    with serve_in_thread(ScriptedBackend("4"), "scripted") as srv:
        client = ChatClient({"base_url": srv.base_url, "model": "scripted", "cache_path": str(tmp_path / "c.sqlite")})
        ratings, counts = geval(client, cases, GEvalOptions(criteria=("correctness", "empowerment"), samples=2))
    assert {p.value for p in ratings.values()} == {4.0} and counts == {("none", "rated_by_samples"): 6}
    assert srv.stats.received == 1 + 6 * 2  # the probe, then 2 samples per item
