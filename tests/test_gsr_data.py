"""GSR data: chain files, filtered heuristic, indexing examples, epoch schedules, chain metrics."""

from __future__ import annotations

import gzip
import json

import pytest

from gsr_train.data.rows import RowError
from gsr_train.datamodules.gsr_data import (
    GSRDataModule,
    Seq2SeqItem,
    default_templates,
    filter_chains,
    load_index_file,
    load_llm_chains,
    load_path_rows,
    pseudo_questions,
    questions_from_paths,
    relation_subjects,
)
from gsr_train.eval.chains import answer_coverage, chain_match, paper_coverage, validity
from gsr_train.kg.index import build_index


def write_jsonl(path, rows):
    with gzip.open(path, "wt") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def test_path_rows_and_variants(tmp_path):
    write_jsonl(
        tmp_path / "train.jsonl.gz",
        [
            {
                "id": "a",
                "question": "who is x's brother",
                "ground_paths": [
                    ["p.person.gender", "p.person.gender"],
                    ["p.sib.sibling", "p.person.x"],
                    [],
                    ["common.topic.notable_types", "p.t.r"],
                ],
                "gpt_paths": [["p.sib.sibling", "p.person.x"]],
            },
            {"id": "b", "question": "where", "ground_paths": [], "gpt_paths": []},
        ],
    )
    rows = load_path_rows(tmp_path, "train")
    assert [r.id for r in rows] == ["a", "b"] and rows[0].llm_paths == [("p.sib.sibling", "p.person.x")]
    raw = questions_from_paths(rows, "raw")[0]
    assert len(raw.chains) == 3 and () not in raw.chains  # 0-hop chains are never targets
    assert questions_from_paths(rows, "filtered")[0].chains == [("p.sib.sibling", "p.person.x")]
    llm = questions_from_paths(rows, "llm", llm={"a": [("p.t.r",)]})
    assert llm[0].chains == [("p.t.r",)] and llm[1].chains == [] and llm[0].ground == raw.ground


@pytest.mark.parametrize(
    "row,field",
    [
        ({"id": "a", "question": "q", "ground_paths": [["r", 3]]}, "ground_paths"),
        ({"id": "a", "question": "", "ground_paths": []}, "question"),
        ({"id": "a", "question": "q"}, "ground_paths"),
        ({"id": "a", "question": "q", "ground_paths": [], "gpt_paths": "r"}, "gpt_paths"),
    ],
)
def test_path_row_errors_name_file_row_field(tmp_path, row, field):
    write_jsonl(tmp_path / "test.jsonl.gz", [row])
    with pytest.raises(RowError) as err:
        load_path_rows(tmp_path, "test")
    assert err.value.field == field and "test.jsonl.gz" in str(err.value) and "'a'" in str(err.value)


def test_real_webqsp_paths(shared_data):
    rows = load_path_rows(shared_data / "webqsp_paths", "train")
    assert len(rows) == 2826 and sum(len(r.ground_paths) for r in rows) == 9745
    assert sum(len(r.llm_paths) for r in rows) == 3742
    filtered = sum(len(q.chains) for q in questions_from_paths(rows, "filtered"))
    assert filtered == 8143


def test_filter_chains():
    assert filter_chains([("a.b.c", "a.b.c"), ("a.b.c", "d.e.f"), ("freebase.x.y",), ()]) == [("a.b.c", "d.e.f")]
    assert filter_chains([("a.b.c", "a.b.c")], drop_repeats=False) == [("a.b.c", "a.b.c")]


def test_llm_and_template_files(tmp_path):
    write_jsonl(tmp_path / "llm.jsonl.gz", [{"id": "a", "llm_paths": [["r.s.t"]]}, {"id": "b", "gpt_paths": []}])
    assert load_llm_chains(tmp_path / "llm.jsonl.gz") == {"a": [("r.s.t",)], "b": []}
    write_jsonl(tmp_path / "bad.jsonl.gz", [{"id": "a"}])
    with pytest.raises(RowError, match="llm_paths"):
        load_llm_chains(tmp_path / "bad.jsonl.gz")
    write_jsonl(
        tmp_path / "t.jsonl.gz",
        [
            {"relation": "a.b.c", "templates": ["who is [SUBJECT]'s c", "no slot here"]},
            {"relation": "a.b.d", "template": "what d does [SUBJECT] have"},
            {"relation": "a.b.e", "question": "Filled question about Bob?"},
        ],
    )
    src = load_index_file(tmp_path / "t.jsonl.gz")
    assert src.templates == {"a.b.c": ["who is [SUBJECT]'s c"], "a.b.d": ["what d does [SUBJECT] have"]}
    assert src.questions == {"a.b.e": ["Filled question about Bob?"]} and sum(src.dropped.values()) == 1
    ex = pseudo_questions(["a.b.c", "a.b.e", "x.y.z"], {"a.b.c": ["Alice", "Bob"]}, src, per_relation=4)
    by = {}
    for e in ex:
        by.setdefault(e.relation, []).append(e.text)
    assert set(by["a.b.c"]) == {"who is alice's c", "who is bob's c"} and len(by["a.b.c"]) == 4
    assert by["a.b.e"] == ["filled question about bob?"]
    assert all("the y" in t for t in by["x.y.z"])  # no subject in the KG: "the <type>"
    assert pseudo_questions(["a.b.c"], {"a.b.c": ["A", "B"]}, per_relation=3, seed=1) == pseudo_questions(
        ["a.b.c"], {"a.b.c": ["A", "B"]}, per_relation=3, seed=1
    )


def test_default_templates():
    ts = default_templates("people.person.place_of_birth")
    assert len(ts) >= 8 and all(t.count("[SUBJECT]") == 1 for t in ts)
    assert any("place of birth" in t for t in ts) and any("person" in t for t in ts)
    assert (
        "spouse" in default_templates("people.person.spouse_s")[0]
        and " s " not in default_templates("people.person.spouse_s")[0]
    )


def test_relation_subjects_exclude_and_skip_mids(tmp_path):
    write_jsonl(
        tmp_path / "train.jsonl.gz",
        [
            {
                "id": "q",
                "question": "q",
                "answer": [],
                "q_entity": ["A"],
                "a_entity": [],
                "graph": [["A", "r.s.t", "B"], ["C", "r.s.t", "D"], ["m.0x", "r.s.t", "E"], ["B", "r.s.u", "A"]],
                "choices": [],
            }
        ],
    )
    index = build_index(tmp_path, splits=("train",))
    subj = relation_subjects(index, ("train",), exclude={"A"}, per_relation=5)
    assert subj == {"r.s.t": ["C"], "r.s.u": ["B"]}


def test_epoch_schedules():
    ret = [Seq2SeqItem("[Retrieval]", f"q{i}", [(0,)]) for i in range(10)]
    idx = [Seq2SeqItem("[Index]", f"p{i}", [(1,)]) for i in range(40)]
    dm = GSRDataModule(None, ret, idx, [], schedule="index_then_joint", index_epochs=2, index_ratio=0.5)
    assert [dm.phase(e) for e in range(4)] == ["index", "index", "joint", "joint"]
    assert len(dm.epoch_items(0)) == 40 and len(dm.epoch_items(2)) == 15
    assert [i.text for i in dm.epoch_items(3)] == [i.text for i in dm.epoch_items(3)]  # deterministic
    assert [i.text for i in dm.epoch_items(3)] != [i.text for i in dm.epoch_items(2)]
    assert GSRDataModule(None, ret, idx, [], schedule="index_then_retrieval", index_epochs=1).phase(1) == "retrieval"
    assert len(GSRDataModule(None, ret, [], [], schedule="retrieval").epoch_items(0)) == 10
    with pytest.raises(ValueError, match="indexing examples"):
        GSRDataModule(None, ret, [], [], schedule="joint")


def test_index_sample_weighted_toward_focus_relations():
    ret = [Seq2SeqItem("[Retrieval]", f"q{i}", [(0,)]) for i in range(20)]
    idx = [Seq2SeqItem("[Index]", f"kg{i}", [(1,)]) for i in range(30)] + [
        Seq2SeqItem("[Index]", f"file{i}", [(2,)]) for i in range(300)
    ]
    focus = [it.text.startswith("kg") for it in idx]
    uniform = GSRDataModule(None, ret, idx, [], index_ratio=1.0)
    weighted = GSRDataModule(None, ret, idx, [], index_ratio=1.0, index_focus=focus, focus_share=0.75)
    for epoch in range(3):
        kg = sum(it.text.startswith("kg") for it in weighted.epoch_items(epoch))
        assert kg == 15 and len(weighted.epoch_items(epoch)) == 40  # 75% of the 20 indexing examples
        assert sum(it.text.startswith("kg") for it in uniform.epoch_items(epoch)) < 10
    # a short focus pool is used whole and the others top the sample up to the same size
    few = GSRDataModule(
        None, ret, idx[:5] + idx[30:], [], index_ratio=1.0, index_focus=focus[:5] + focus[30:], focus_share=1.0
    )
    items = few.epoch_items(0)
    assert sum(it.text.startswith("kg") for it in items) == 5 and len(items) == 40
    with pytest.raises(ValueError, match="kg_share must be in"):
        GSRDataModule(None, ret, idx, [], index_focus=focus, focus_share=1.5)
    with pytest.raises(ValueError, match="one index_focus flag"):
        GSRDataModule(None, ret, idx, [], index_focus=focus[:3], focus_share=0.5)


def test_chain_metrics():
    beams = [[("a",), ("b", "c"), None], [("x",)], [("q",)]]
    ground = [[("b", "c")], [("y",)], []]
    assert chain_match(beams, ground, ns=(1, 2)) == {"questions": 2, "match@1": 0.0, "match@2": 0.5}
    cov = answer_coverage([{"A", "B", "C", "D"}, set()], [["A", "Z"], ["A"]])
    assert cov["precision"] == pytest.approx(0.125) and cov["recall"] == pytest.approx(0.25)
    assert cov["hits"] == 0.5 and cov["f1"] == pytest.approx((2 * 0.25 * 0.5 / 0.75) / 2)
    pap = paper_coverage([["A", "B", "A"], ["C"]], [["A"], ["A"]])
    assert pap["precision"] == pytest.approx(0.25) and pap["recall"] == pytest.approx(0.5)
    assert pap["f1"] == pytest.approx((2 * 0.5 / 1.5) / 2) and pap["macro_f1"] == pytest.approx(2 * 0.25 * 0.5 / 0.75)
    v = validity([[True, False, False, True], [False]], top_n=2)
    assert v["valid_fraction"] == pytest.approx(0.4) and v["valid_fraction@2"] == pytest.approx(1 / 3)
    assert v["questions_with_valid_chain"] == 0.5
