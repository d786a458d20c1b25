"""LLM patterns: parsing both papers' formats, failures counted, via a loopback fake server."""

from __future__ import annotations

import json

import pytest

from gsr_train.llm.client import ChatClient
from gsr_train.llm.server import ScriptedBackend, serve_in_thread
from gsr_train.patterns.llm import LLMPatternStats, PatternParseError, llm_patterns, parse_safe, parse_simgrag


def test_parse_simgrag_formats():
    p = parse_simgrag(
        '```json\n{"divided": ["x"], "triples": [["UNKNOWN actor 1", "actor of", "Flashpoint"], '
        '["UNKNOWN actor 1", "actor of", "UNKNOWN film 1"]]}\n```'
    )
    assert [n.text for n in p.nodes] == [None, "Flashpoint", None]
    assert [n.type for n in p.nodes] == ["actor", None, "film"]
    assert [(e.head, e.relation, e.tail) for e in p.edges] == [(0, "actor of", 1), (0, "actor of", 2)]
    # Python-style tuples and quotes, as in the paper's examples; unknown relations
    q = parse_simgrag("output: {'divided': ['a'], 'triples': [('Her', 'UNKNOWN relation 1', 'UNKNOWN person 1')]}")
    assert q.edges[0].relation is None and q.nodes[0].text == "Her"
    for bad, reason in [
        ("no idea", "no JSON object"),
        ('{"triples": []}', "no triples"),
        ('{"triples": [["a", "r"]]}', "malformed triple"),
        ('{"triples": [["a", "r", "b"], ["c", "r", "d"]]}', "disconnected"),
        ('{"triples": [["a", "r", "a"]]}', "self-loop"),
    ]:
        with pytest.raises(PatternParseError) as e:
            parse_simgrag(bad)
        assert e.value.reason == reason


def test_parse_safe_types_and_cvt_hops():
    p = parse_safe(
        json.dumps(
            {
                "plan": "...",
                "nodes": {"Halloween 4": "film.film", "unk1": "people.person"},
                "edges": [["Halloween 4", "film.film.starring||film.performance.actor", "unk1"]],
            }
        )
    )
    assert len(p.nodes) == 3 and len(p.edges) == 2
    assert p.nodes[0].text == "Halloween 4" and p.nodes[0].type == "film.film"
    assert p.nodes[1].text is None and p.nodes[1].type == "people.person"
    assert p.nodes[2].type == "film.performance"  # the CVT gets the domain of the second hop
    assert [e.relation for e in p.edges] == ["film.film.starring", "film.performance.actor"]
    with pytest.raises(PatternParseError, match="disconnected"):
        parse_safe('{"nodes": {}, "edges": [["a", "r.s.t", "unk1"], ["b", "r.s.t", "unk2"]]}')


def _answer(messages, params):
    q = messages[-1]["content"]
    if "nixon" in q:
        return '{"divided": ["a"], "triples": [["Richard Nixon", "spouse", "UNKNOWN person 1"]]}'
    if "broken" in q:
        return "I think the answer is Paris."
    return (
        '{"plan": "p", "nodes": {"Mount Everest": "location.location", "unk1": "location.country"}, '
        '"edges": [["Mount Everest", "location.location.partially_containedby", "unk1"]]}'
    )


def test_llm_patterns_through_the_client(tmp_path):
    with serve_in_thread(ScriptedBackend(_answer)) as srv:
        cfg = {
            "base_url": srv.base_url,
            "model": "scripted",
            "cache_path": str(tmp_path / "c.sqlite"),
            "api_key_env": None,
            "backoff_base": 0.01,
            "max_retries": 1,
        }
        with ChatClient(cfg) as client:
            stats = LLMPatternStats()
            qs = [("q1", "who was richard nixon married to"), ("q2", "broken question")]
            pats = llm_patterns(client, qs, "simgrag", stats=stats)
            assert len(pats[0]) == 1 and pats[0][0].nodes[0].text == "Richard Nixon" and pats[1] == []
            assert stats.parsed == 1 and dict(stats.parse_errors) == {"no JSON object": 1}
            assert "q2" in stats.examples[0]
            # the few-shot prompt went out with the question filled in
            assert srv.stats.received == 2
            safe = llm_patterns(client, [("q3", "where is mount everest")], "safe")
            assert safe[0][0].nodes[1].type == "location.country"
            with pytest.raises(ValueError, match="kind"):
                llm_patterns(client, qs, "other")
