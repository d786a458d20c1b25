"""SimGRAG end to end on a tiny KG: costs, chain patterns, LLM-style texts, result files."""

from __future__ import annotations

import math

import pytest

from gsr_train.eval.results import read_results
from gsr_train.patterns.pattern import Pattern, PatternEdge, PatternNode, path_pattern
from gsr_train.patterns.retrieve import write_pattern_results
from gsr_train.patterns.sources import chain_patterns_from_results, gold_patterns
from gsr_train.retrievers.options import SimGRAGConfig
from gsr_train.retrievers.simgrag import simgrag_retrieve
from tests.patterns_helpers import tiny_index


def _triples(index, split, q, sub):
    trip = index[split].global_edges()[int(index[split].edge_ptr[q]) :][list(sub.edges)].tolist()
    return [(index.entities[h], index.relations[r], index.entities[t]) for h, r, t in trip]


def test_chain_pattern_finds_the_answer_through_a_cvt(tmp_path):
    index, emb = tiny_index(tmp_path)
    rel, ent = index.relation_lookup(), index.entity_lookup()
    chain = ["people.person.spouse_s", "people.marriage.spouse"]
    p = path_pattern("Richard Nixon", chain, ent["Richard Nixon"], [rel[r] for r in chain], source="gsr")
    run = simgrag_retrieve(index, "test", emb, [[p], []], {"k": 5, "k_node": 2, "k_rel": 2})
    best = run.subgraphs[0][0]
    assert best.distance == pytest.approx(0.0, abs=1e-6)
    assert set(_triples(index, "test", 0, best)) == {
        ("Richard Nixon", "people.person.spouse_s", "m.01"),
        ("m.01", "people.marriage.spouse", "Pat Nixon"),
    }
    assert run.no_pattern == 1 and run.subgraphs[1] == []
    # later subgraphs are never better and are distinct edge sets
    d = [s.distance for s in run.subgraphs[0]]
    assert d == sorted(d) and len({frozenset(s.edges) for s in run.subgraphs[0]}) == len(d)


def test_text_pattern_needs_and_uses_the_encoder(tmp_path):
    index, emb = tiny_index(tmp_path)
    p = Pattern(
        (PatternNode(text="richard nixon"), PatternNode(type="country")),
        (PatternEdge(0, 1, "people person nationality"),),
        source="llm",
    )
    with pytest.raises(ValueError, match="encoder"):
        simgrag_retrieve(index, "test", emb, [[p], []])
    run = simgrag_retrieve(
        index,
        "test",
        emb,
        [[p], []],
        {"k": 3, "k_node": 1, "k_rel": 1},
        encoder="hashing",
        cache_dir=tmp_path / "cache",
    )
    assert _triples(index, "test", 0, run.subgraphs[0][0]) == [
        ("Richard Nixon", "people.person.nationality", "United States")
    ]
    assert run.subgraphs[0][0].distance > 0  # texts differ from the KG names


def test_results_file_round_trip_and_sources(tmp_path):
    index, emb = tiny_index(tmp_path)
    from gsr_train.kg.paths import get_supervision

    sup = get_supervision(index, "test", tmp_path / "cache")
    gold = gold_patterns(index, "test", sup.chains_filtered)
    assert all(p and p[0].source == "gold" for p in gold)
    run = simgrag_retrieve(index, "test", emb, gold, SimGRAGConfig(k=4))
    out = tmp_path / "simgrag.jsonl"
    write_pattern_results(out, index, "test", run, "simgrag-gold")
    scores, _ = read_results(out, index, "test")
    split = index["test"]
    for q in range(len(split)):
        s = scores[int(split.edge_ptr[q]) : int(split.edge_ptr[q + 1])]
        assert int((s > -math.inf).sum()) == len({e for g in run.subgraphs[q] for e in g.edges})
    # GSR-style chains file -> patterns; unknown ids are an error unless skipped and counted
    gsr = tmp_path / "gsr.jsonl"
    gsr.write_text(
        '{"id": "q2", "chains": [{"topic": "Yorba Linda", "chain": ["location.location.containedby"], '
        '"score": -0.1}, {"topic": "Nowhere", "chain": ["x.y.z"]}]}\n'
        '{"id": "other", "chains": []}\n'
    )
    with pytest.raises(ValueError, match="line 2.*'other'"):
        chain_patterns_from_results(gsr, index, "test")
    from gsr_train.patterns.sources import SourceStats

    st = SourceStats()
    pats = chain_patterns_from_results(gsr, index, "test", stats=st, skip_unknown=True)
    assert [len(p) for p in pats] == [0, 1] and st.skipped == {"unknown topic": 1, "id not in split": 1}
