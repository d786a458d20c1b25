"""metrics.json rows carry intervals; gsr-train compare; a seed sweep's table over seeds with its plot."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from gsr_train.cli import main as cli
from gsr_train.eval.aggregate import aggregate, over_seeds
from gsr_train.eval.intervals import QuestionValues
from gsr_train.eval.tail import (
    QUESTIONS_FILE,
    flat_rows,
    metrics_row,
    read_metrics,
    read_question_values,
    write_metrics,
)


def _run(folder, hits, method="subgraphrag", seed=None, ids=None, data=("synthetic", "f0")):
    """A run folder with one retrieval row: answer_recall from ``hits`` (one per question)."""
    folder.mkdir(parents=True)
    ids = ids or [f"q{i}" for i in range(len(hits))]
    values = QuestionValues(ids).add_mean("answer_recall", hits).add_mean("answer_recall@10", hits)
    figures = values.values()
    row = metrics_row(method, "test", 10, figures, None, folder / "results_test.jsonl", values)
    write_metrics(folder, "subgraphrag_quickstart", data[0], data[1], [row])
    if seed is not None:
        (folder / ".hydra").mkdir()
        (folder / ".hydra" / "overrides.yaml").write_text(f"- +experiment=subgraphrag_quickstart\n- seed={seed}\n")
    return folder


def _hits(n, p, seed):
    return (np.random.default_rng(seed).random(n) < p).astype(float)


def test_rows_carry_intervals_and_their_questions(tmp_path):
    run = _run(tmp_path / "a", _hits(200, 0.7, 0))
    doc = read_metrics(run / "metrics.json")
    (row,) = doc["rows"]
    low, high = row["intervals"]["answer_recall"]
    assert low < row["metrics"]["answer_recall"] < high and "_per_question" not in row
    (flat,) = flat_rows(doc)  # readers of metrics.json see the value as before, the bounds beside it
    assert flat["answer_recall"] == row["metrics"]["answer_recall"] and flat["answer_recall_low"] == low
    assert "intervals" not in flat
    ((labels, values),) = read_question_values(run)
    assert labels["method"] == "subgraphrag" and len(values) == 200
    assert values.values()["answer_recall"] == pytest.approx(row["metrics"]["answer_recall"])


def test_compare_two_runs_prints_one_table_and_writes_json(tmp_path, capsys):
    a = _run(tmp_path / "a", np.maximum(_hits(300, 0.6, 0), _hits(300, 0.5, 1)), "subgraphrag")
    b = _run(tmp_path / "b", _hits(300, 0.6, 0), "cosine-parts")
    assert cli(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    line = next(
        x for x in out.splitlines() if x.startswith("| subgraphrag [test] | cosine-parts [test] | answer_recall |")
    )
    assert "| 300 |" in line and line.endswith("| <0.001 |")  # p
    doc = json.loads((a / f"compare_{tmp_path.name}_b.json").read_text())  # B's parent and folder: two B runs of
    # one time stamp under different experiments do not share a file
    (m,) = [x for x in doc["rows"][0]["metrics"] if x["metric"] == "answer_recall"]
    assert m["low"] > 0 and m["diff"] == pytest.approx(m["a"] - m["b"]) and m["p_value"] < 0.01


def test_compare_refuses_in_one_line(tmp_path, capsys):
    a = _run(tmp_path / "a", _hits(10, 0.5, 0))
    assert cli(["compare", str(a), str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.strip().endswith("nope: no such run folder")
    old = tmp_path / "old"
    old.mkdir()
    (old / "metrics.json").write_text("{}")
    assert cli(["compare", str(a), str(old)]) == 2
    assert f"no {QUESTIONS_FILE}" in capsys.readouterr().err
    other = _run(tmp_path / "other", _hits(10, 0.5, 0), ids=[f"x{i}" for i in range(10)])
    assert cli(["compare", str(a), str(other)]) == 2
    err = capsys.readouterr().err
    assert "share no question" in err and len(err.strip().splitlines()) == 1


def test_seed_sweep_table_has_mean_std_and_interval(tmp_path, capsys):
    for seed, p in enumerate((0.6, 0.65, 0.7)):
        _run(tmp_path / str(seed), _hits(200, p, seed), seed=seed)
    rows = aggregate(tmp_path)
    assert len(rows) == 3 and {r["seed"] for r in rows} == {"0", "1", "2"}
    (row,) = over_seeds(rows)
    recall = [r["answer_recall"] for r in rows]
    assert row["seeds"] == 3 and row["answer_recall"] == pytest.approx(np.mean(recall), abs=1e-4)
    assert row["answer_recall_std"] == pytest.approx(np.std(recall, ddof=1), abs=1e-4)
    assert row["answer_recall_low"] < row["answer_recall"] < row["answer_recall_high"]
    md = (tmp_path / "aggregate.md").read_text()
    assert "## over seed" in md and f"{row['answer_recall']:.4f} ± {row['answer_recall_std']:.4f} (" in md
    assert list(csv.DictReader((tmp_path / "aggregate_seeds.csv").open()))[0]["seeds"] == "3"
    assert (tmp_path / "aggregate_recall.png").read_bytes()[:4] == b"\x89PNG"
    assert "## over seed" in capsys.readouterr().out


def test_compare_refuses_runs_of_different_data_and_names_a_killed_run(tmp_path, capsys):
    """Two runs whose question ids overlap (OKGQA-style 0..N) on different datasets: one line naming both,
    not a table of meaningless pairs; a run that was killed before it scored: its status, and how to go on."""
    a = _run(tmp_path / "a", _hits(20, 0.5, 0), ids=[str(i) for i in range(20)])
    b = _run(tmp_path / "b", _hits(20, 0.5, 1), ids=[str(i) for i in range(20)], data=("okgqa", "f9"))
    assert cli(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ran on synthetic (data f0)" in err and "okgqa (data f9)" in err
    same = _run(tmp_path / "same", _hits(20, 0.5, 1), ids=[str(i) for i in range(20)], data=("synthetic", "f0"))
    assert cli(["compare", str(a), str(same)]) == 0
    capsys.readouterr()
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "run.json").write_text(json.dumps({"status": "running", "experiment": "subgraphrag_quickstart"}))
    assert cli(["compare", str(a), str(killed)]) == 2
    err = capsys.readouterr().err
    assert "did not finish (status: killed)" in err and "resume=auto" in err and "not a run folder" not in err
