"""Cosine baseline: vectorised scores equal a naive per-edge loop; label loading; CLI."""

from __future__ import annotations

import gzip
import json

import pytest
import torch
import torch.nn.functional as F

from gsr_train.kg.index import build_index, has_text
from gsr_train.retrievers.cosine import cosine_scores, triple_texts
from gsr_train.text.embeddings import get_embeddings
from gsr_train.text.encoders import HashingEncoder

from .obama_helpers import BORN, MARRIED, write_splits

ROWS = [
    {**BORN, "graph": [*BORN["graph"], ["Honolulu", "location.location.containedby", "Hawaii"]]},
    MARRIED,
    {
        "id": "q3",
        "question": "what state is honolulu in",
        "answer": ["Hawaii"],
        "q_entity": ["Honolulu"],
        "a_entity": ["Hawaii"],
        "graph": [
            ["Honolulu", "location.location.containedby", "Hawaii"],
            ["Barack Obama", "people.person.place_of_birth", "Honolulu"],
        ],
        "choices": [],
    },
]


@pytest.fixture()
def small(tmp_path):
    index = build_index(write_splits(tmp_path / "data", {"test": ROWS}), ("test",))
    enc = HashingEncoder(dim=32)
    return index, enc, get_embeddings(index, enc, tmp_path / "cache"), tmp_path


def naive_parts(index, split, emb, q_emb):
    out = []
    for qi in range(len(split)):
        for h, r, t in index.triple_strings("test", qi):
            hid, rid, tid = index.entities.index(h), index.relations.index(r), index.entities.index(t)
            q = F.normalize(q_emb[qi], dim=0)
            s = torch.dot(q, F.normalize(emb.relation[rid], dim=0))
            for e, eid in ((h, hid), (t, tid)):
                if has_text(e):
                    s = s + torch.dot(q, F.normalize(emb.entity[eid], dim=0))
            out.append(s)
    return torch.stack(out)


def test_parts_equals_naive(small):
    index, _, emb, _ = small
    split = index["test"]
    scores = cosine_scores(split, emb.question["test"], emb, "parts")
    assert scores.shape == (split.edge_rel.numel(),)
    assert torch.allclose(scores, naive_parts(index, split, emb, emb.question["test"]), atol=1e-5)
    # the chunked path gives the same numbers
    assert torch.allclose(cosine_scores(split, emb.question["test"], emb, "parts", max_cells=2), scores, atol=1e-6)


def test_parts_ignores_no_text_entities(small):
    index, _, emb, _ = small
    split = index["test"]
    before = cosine_scores(split, emb.question["test"], emb, "parts")
    garbage = emb.entity.clone()
    garbage[~emb.entity_has_text] = 5.0  # even if those rows held vectors, they must not count
    emb.entity = garbage
    after = cosine_scores(split, emb.question["test"], emb, "parts")
    assert torch.allclose(before, after)
    # q2 edge (g.11b6, containedby, Honolulu): only relation + tail count
    q = F.normalize(emb.question["test"][1], dim=0)
    expected = (
        q @ emb.relation[index.relations.index("location.location.containedby")]
        + q @ emb.entity[index.entities.index("Honolulu")]
    )
    e = int(split.edge_ptr[1]) + 2
    assert torch.isclose(before[e], expected, atol=1e-5)


def test_verbalised_equals_naive(small):
    index, enc, emb, tmp_path = small
    split = index["test"]
    scores = cosine_scores(
        split, emb.question["test"], emb, "verbalised", index=index, encoder=enc, cache_dir=tmp_path / "cache"
    )
    strings = []
    for qi in range(len(split)):
        for h, r, t in index.triple_strings("test", qi):
            strings.append(" ".join(x for x in (h if has_text(h) else "", r, t if has_text(t) else "") if x))
    assert strings[1] == "Barack Obama people.person.spouse_s"
    naive = F.normalize(emb.question["test"][split.edge_question()], dim=-1) @ enc.encode(strings).T
    assert torch.allclose(scores, naive.diagonal(), atol=1e-5)
    assert triple_texts(index, split.global_edges()[:1]) == strings[:1]


def test_bad_mode_and_shape(small):
    index, _, emb, _ = small
    with pytest.raises(ValueError, match="mode"):
        cosine_scores(index["test"], emb.question["test"], emb, "dot")
    with pytest.raises(ValueError, match="expected"):
        cosine_scores(index["test"], emb.question["test"][:2], emb)


def test_vectorised_matches_per_question_on_real_graphs(webqsp_mini, tmp_path):
    index = build_index(webqsp_mini, ("validation",))
    emb = get_embeddings(index, HashingEncoder(dim=32), tmp_path)
    split = index["validation"]
    scores = cosine_scores(split, emb.question["validation"], emb)
    for i in (0, 7, len(split) - 1):
        sub = split.subset([i])
        e0, e1 = int(split.edge_ptr[i]), int(split.edge_ptr[i + 1])
        assert torch.allclose(cosine_scores(sub, emb.question["validation"][i : i + 1], emb), scores[e0:e1], atol=1e-5)


def test_cli_end_to_end(small, capsys):
    pytest.importorskip("gsr_train.eval.retrieval")
    pytest.importorskip("gsr_train.eval.results")
    pytest.importorskip("gsr_train.kg.paths")
    from gsr_train.commands.cosine import main

    _, _, _, tmp_path = small
    labels = tmp_path / "labels.jsonl.gz"
    with gzip.open(labels, "wt") as f:
        f.write(json.dumps({"id": "q1", "triples": [["Honolulu", "location.location.containedby", "Hawaii"]]}) + "\n")
        f.write(json.dumps({"id": "q3", "triples": [["Honolulu", "location.location.containedby", "Hawaii"]]}) + "\n")
    result = main(
        [
            "--data",
            str(tmp_path / "data"),
            "--split",
            "test",
            "--encoder",
            "hashing",
            "--top_k",
            "3",
            "--cache_dir",
            str(tmp_path / "cache"),
            "--out",
            str(tmp_path / "out"),
            "--ks",
            "1,3",
            "--labels",
            str(labels),
        ]
    )
    assert (tmp_path / "out" / "results_test.jsonl.gz").exists() and (tmp_path / "out" / "metrics.json").exists()
    rows = [json.loads(line) for line in gzip.open(tmp_path / "out" / "results_test.jsonl.gz", "rt")]
    assert [r["id"] for r in rows] == ["q1", "q2", "q3"] and all(len(r["triples"]) <= 3 for r in rows)
    assert result["questions"] == 3 and result["labels"]["labelled_questions"] == 2
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert saved["metrics"] == result["metrics"] and saved["method"] == "cosine-parts"
    row = saved["rows"][0]  # the tail's row: recall at the largest evaluated K <= k
    assert saved["schema"] == "gsr-train/metrics/1" and row["method"] == "cosine-parts" and row["k"] == 3
    assert row["metrics"]["answer_recall"] == result["metrics"]["overall"]["answer_recall"]["3"]
    assert "cosine" in capsys.readouterr().out


@pytest.mark.parametrize("num_rows", [50, 100_000])  # dense row map / torch.unique paths
def test_unique_inverse_matches_torch_unique(num_rows):
    from gsr_train.retrievers.cosine import _unique_inverse

    ids = torch.randint(0, 50, (200,), generator=torch.Generator().manual_seed(0))
    unique, inverse = _unique_inverse(ids, num_rows)
    ref_u, ref_i = torch.unique(ids, return_inverse=True)
    assert torch.equal(unique, ref_u) and torch.equal(inverse, ref_i) and torch.equal(unique[inverse], ids)
