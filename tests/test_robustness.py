"""The robustness command: figures per retriever x perturbation x level, GSR chains, report, Hydra runners."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from gsr_train.eval.retrieval import retrieval_metrics
from gsr_train.kg.paths import build_supervision
from gsr_train.retrievers.classic import classic_scores
from gsr_train.retrievers.cosine import cosine_scores
from gsr_train.retrievers.gsr_chains import GSRChains
from gsr_train.robustness.run import evaluate_robustness, plot, report_tables
from gsr_train.text.embeddings import get_embeddings
from gsr_train.text.encoders import HashingEncoder
from tests.robustness_helpers import toy_index

from .conftest import compose_config


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("robust")
    index = toy_index(tmp, n_questions=5, n_entities=25, n_edges=60)
    emb = get_embeddings(index, HashingEncoder(dim=32), tmp / "cache")
    split = index["test"]
    gold_chain = (index.relations.index("film.film.directed_by"), index.relations.index("people.person.nationality"))
    chains = GSRChains([[(gold_chain, -0.1), ((0, 0, 0, 0), -5.0)] for _ in range(len(split))], top_n=2)
    q = emb.question["test"]
    retrievers = {
        "cosine": lambda s: (cosine_scores(s, q, emb), {}),
        "classic-pcst": lambda s: (classic_scores(s, q, emb, "pcst"), {}),
        "gsr": chains.score,
    }
    return tmp, index, split, emb, retrievers


def _row(figures, retriever, method, level):
    return next(
        r for r in figures["results"] if (r["retriever"], r["method"], r["level"]) == (retriever, method, level)
    )


def test_evaluate_robustness_figures(toy):
    tmp, index, split, emb, retrievers = toy
    gold = build_supervision(split).triple_label
    figs = evaluate_robustness(split, retrievers, gold, ["swap", "delete"], [0.5, 1.0], [5, 50], seed=1)
    assert len(figs["results"]) == 3 * (1 + 2 * 2) and len(figs["similarity"]) == 5
    base = retrieval_metrics(split, cosine_scores(split, emb.question["test"], emb), [5, 50], sp_label=gold)
    none = _row(figs, "cosine", "none", 0.0)
    assert none["answer_recall"]["all"]["50"] == pytest.approx(base.overall["answer_recall"][50])
    assert none["sp_recall"]["all"]["5"] == pytest.approx(base.overall["sp_recall"][5])
    assert none["answer_recall"]["touched"]["n"] == 0
    for name in retrievers:
        gone = _row(figs, name, "delete", 1.0)
        assert gone["answer_recall"]["all"]["50"] == 0.0 and gone["sp_recall"]["all"]["n"] == 0
        half = _row(figs, name, "swap", 0.5)
        a = half["answer_recall"]
        assert a["touched"]["n"] + a["untouched"]["n"] == a["all"]["n"] == len(split)
    g0, g1 = _row(figs, "gsr", "none", 0.0), _row(figs, "gsr", "delete", 1.0)
    assert g0["extra"]["questions_with_valid_chain"] == 1.0 and g0["answer_recall"]["all"]["50"] == 1.0
    assert g1["extra"]["questions_with_valid_chain"] == 0.0 and g1["extra"]["valid@2"] == 0.0
    sims = {(s["method"], s["level"]): s for s in figs["similarity"]}
    assert sims[("none", 0.0)]["sc2d"] == 1.0 and sims[("delete", 1.0)]["changed_fraction"] == 1.0
    tables = report_tables(figs, 50)
    assert "| gsr | delete | 1.0 |" in tables and "SC2D" in tables and "ans@50 touched" in tables
    # every recall with its 95% interval over the questions: it holds the figure, and the table prints it
    for r in figs["results"]:
        for m in ("answer_recall", "sp_recall"):
            for group, per_k in r[m].items():
                for k, (low, high) in per_k["intervals"].items():
                    assert low <= per_k[k] <= high, (r["retriever"], r["method"], m, group, k)
    a = _row(figs, "cosine", "swap", 0.5)["answer_recall"]["all"]
    low, high = a["intervals"]["50"]
    assert f"| {a['50']:.4f} ({low:.3f}-{high:.3f}) |" in tables
    again = evaluate_robustness(split, retrievers, gold, ["swap"], [0.5], [5, 50], seed=1)  # seeded: the same
    assert _row(again, "cosine", "swap", 0.5)["answer_recall"]["all"]["intervals"] == a["intervals"]
    png = plot(figs, tmp / "plot.png", "answer_recall", 50)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_protected_gold_keeps_gsr_answers(toy):
    _, _, split, _, retrievers = toy
    gold = build_supervision(split).triple_label
    figs = evaluate_robustness(
        split, {"gsr": retrievers["gsr"]}, gold, ["delete", "swap"], [1.0], [5, 50], protect_gold=True
    )
    for r in figs["results"]:
        assert r["answer_recall"]["touched"]["n"] == 0
        assert r["answer_recall"]["all"]["50"] == 1.0  # the gold chain still executes on its untouched edges
        assert r["sp_recall"]["all"]["n"] == len(split)


def test_gsr_chains_from_results_file(toy, tmp_path):
    _, index, split, _, _ = toy
    path = tmp_path / "gsr.jsonl"
    rows = [
        {
            "id": qid,
            "triples": [],
            "scores": [],
            "beams": [
                {"chain": ["film.film.directed_by", "people.person.nationality"], "score": -0.2},
                {"chain": ["no.such.relation"], "score": -1.0},
            ],
        }
        for qid in split.ids
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    chains = GSRChains.from_results(path, split, index.relations, top_n=3)
    assert chains.beams[0][1][0] is None
    scores, extra = chains.score(split)
    assert extra["valid@3"] == 0.5 and extra["questions_with_valid_chain"] == 1.0
    assert bool((scores > -math.inf).any()) and float(scores.max()) == pytest.approx(-0.2)
    assert "row_fields" not in extra  # paths only when asked (they need the names)
    _, extra = chains.with_paths(index.entities, index.relations, max_paths=2).score(split)
    paths = extra["row_fields"]["paths"]
    assert len(paths) == len(split) and any(paths) and all(len(p) <= 2 for p in paths)
    for per_q in paths:  # each path follows the decoded chain, hop by hop
        for text in per_q:
            assert text.index(" film.film.directed_by ") < text.index(" people.person.nationality ")
            assert text.count(" -> ") + text.count(" <- ") == 4  # two hops, two arrows each
    path.write_text(json.dumps({"id": split.ids[0], "triples": []}) + "\n")
    with pytest.raises(ValueError, match="no 'beams'"):
        GSRChains.from_results(path, split, index.relations)


def _compose(tmp_path, overrides):
    return compose_config(
        [
            f"data.dir={tmp_path / 'data'}",
            "data.splits=[test]",
            f"paths.output_dir={tmp_path / 'out'}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            "experiment_name=test",
            "encoder.name=hashing",
            "~encoder.batch_size",
            "~encoder.max_length",
            "eval_ks=[5,50]",
            *overrides,
        ]
    )


def test_hydra_runners(toy, tmp_path):
    from gsr_train.runs.classic import run as classic_run
    from gsr_train.runs.robustness import run

    toy_index(tmp_path, n_questions=5, n_entities=25, n_edges=60)
    cfg = _compose(
        tmp_path,
        [
            "+experiment=robustness_quickstart",
            "robustness.methods=[replace,rewire]",
            "robustness.levels=[0.5]",
            "robustness.kge.epochs=2",
            "robustness.kge.dim=8",
            "robustness.retrievers.classic=[triplets]",
            "top_k=50",
        ],
    )
    figs = run(cfg)
    out = tmp_path / "out"
    assert {"robustness.md", "metrics.json", "robustness_answer_recall.png", "robustness_sp_recall.png"} <= {
        p.name for p in out.iterdir()
    }
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["retrievers"] == ["cosine", "classic-triplets"] == figs["retrievers"]
    assert len(saved["results"]) == 2 * 3 and saved["similarity"][1]["ats"] is not None
    for row in saved["rows"]:  # the tail's rows carry the intervals of their figures
        low, high = row["intervals"]["answer_recall"]
        assert low <= row["metrics"]["answer_recall"] <= high
    cfg = _compose(tmp_path, ["+experiment=classic_pcst", "classic.pcst.budget=4"])
    res = classic_run(cfg)
    assert res["method"] == "classic-pcst" and 0 < res["mean_retrieved_triples"] <= 4
    lines = gzip.open(out / "results_test.jsonl.gz", "rt").read().splitlines()
    assert len(lines) == 5 and all(len(json.loads(x)["triples"]) <= 4 for x in lines)
