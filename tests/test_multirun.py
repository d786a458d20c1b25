"""Hydra multirun over 2 model sizes x 2 K values ends with one aggregated table; launcher configs compose."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from gsr_train.eval.aggregate import aggregate, collect, to_markdown

from .conftest import REPO, compose_config, quiet
from .subgraphrag_toy import write_toy

pytestmark = pytest.mark.integration


def _env() -> dict:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "PYTHONWARNINGS": "ignore",
    }


def _train(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "train.py", *args], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_local_multirun_sizes_by_k_gives_one_table(tmp_path):
    data = write_toy(tmp_path / "data", sizes=(16, 6, 6))
    sweep = tmp_path / "sweep"
    proc = _train(
        "-m",
        "+experiment=subgraphrag_quickstart",
        f"data.dir={data}",
        "data.name=toy",
        "encoder.name=hashing",
        "+encoder.dim=32",
        "model.hidden=16,32",
        "top_k=5,20",
        "model.train.epochs=1",
        "model.train.graphs_per_batch=4",
        "subgraphrag.compare_cosine=false",
        *quiet(),
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={sweep}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = list(csv.DictReader((sweep / "aggregate.csv").open()))
    assert len(rows) == 4
    assert sorted((r["model.hidden"], r["K"]) for r in rows) == [("16", "20"), ("16", "5"), ("32", "20"), ("32", "5")]
    assert all(r["top_k"] == r["K"] and r["method"] == "subgraphrag" for r in rows)
    for r in rows:  # recall at K matches the run's own metrics.json
        res = json.loads((sweep / r["job"] / "metrics.json").read_text())
        assert float(r["answer_recall"]) == pytest.approx(res["at_k"]["answer_recall"], abs=1e-4)
        assert res["at_k"]["k"] == int(r["K"]) and res["model"]["scorer"]["hidden"] == int(r["model.hidden"])
    # more triples kept never finds fewer answers (same model size, same seed)
    by = {(r["model.hidden"], r["K"]): float(r["answer_recall"]) for r in rows}
    assert by[("16", "20")] >= by[("16", "5")] and by[("32", "20")] >= by[("32", "5")]
    md = (sweep / "aggregate.md").read_text()
    assert "| job | method | data | split | K | model.hidden | top_k |" in md
    # the CLI writes the same table again
    again = subprocess.run(
        [sys.executable, "-m", "gsr_train.cli", "aggregate", str(sweep), "--no_write"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0 and to_markdown(collect(sweep)) in again.stdout


def test_aggregate_reads_one_schema_for_every_method(tmp_path, caplog):
    from gsr_train.eval.tail import metrics_row, write_metrics

    for job in "01234":
        (tmp_path / job).mkdir()
    write_metrics(
        tmp_path / "0",
        "gsr_quickstart",
        "toy",
        "f0",
        [metrics_row("gsr", "test", 3, {"match@1": 0.5, "match@3": 0.75}, "m/", None, mode="constrained")],
        {"fit": {"epochs_run": 2}},
    )
    write_metrics(
        tmp_path / "1",
        "reader_webqsp_mini",
        "toy",
        "f1",
        [
            metrics_row("smollm2", "test", 30, {"hit": 0.6}, "a/", None, variant="finetuned_retrieved"),
            metrics_row("smollm2", "test", 30, {"hit": 0.2}, None, None, variant="base_retrieved"),
        ],
    )
    write_metrics(
        tmp_path / "2",
        "cosine_baseline",
        "toy",
        "f2",
        [metrics_row("cosine-parts", "test", 100, {"answer_recall": 0.7}, None, "r.jsonl")],
        {"metrics": {"overall": {"answer_recall": {"100": 0.7}}}},
    )
    (tmp_path / "3" / "metrics.json").write_text(json.dumps({"method": "cosine-parts", "k": 100}))  # no schema
    (tmp_path / "4" / "metrics.json").write_text("{not json")
    with caplog.at_level("WARNING"):
        rows = aggregate(tmp_path, quiet=True)
    assert [(r["job"], r["method"], r["K"]) for r in rows] == [
        ("0", "gsr", 3),
        ("1", "smollm2", 30),
        ("1", "smollm2", 30),
        ("2", "cosine-parts", 100),
    ]
    assert rows[0]["match@3"] == 0.75 and rows[0]["mode"] == "constrained" and rows[1]["hit"] == 0.6
    assert rows[1]["variant"] == "finetuned_retrieved" and rows[3]["answer_recall"] == 0.7 and rows[3]["data"] == "toy"
    assert (tmp_path / "aggregate.md").read_text().count("\n| ") == 5  # header + 4 rows
    assert "not a gsr-train/metrics/1 metrics file" in caplog.text and "not valid JSON" in caplog.text


def test_metrics_rows_are_checked_when_written(tmp_path):
    from gsr_train.eval.tail import read_metrics, write_metrics

    with pytest.raises(ValueError, match="lacks"):
        write_metrics(tmp_path, "x", "toy", None, [{"method": "m", "metrics": {}}])
    with pytest.raises(ValueError, match="header keys"):
        write_metrics(tmp_path, "x", "toy", None, [], {"rows": []})
    (tmp_path / "metrics.json").write_text(json.dumps({"schema": "gsr-train/metrics/1", "rows": [{"method": "m"}]}))
    with pytest.raises(ValueError, match="rows with metrics"):
        read_metrics(tmp_path / "metrics.json")


@pytest.mark.parametrize("launcher", ["slurm", "local"])
def test_launcher_configs_compose_without_a_cluster(launcher):
    proc = _train(
        "--cfg", "job", f"hydra/launcher={launcher}", "+experiment=gsr_base", "trainer=ddp", "trainer.devices=4"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "runner: gsr" in proc.stdout and "strategy: ddp" in proc.stdout
    # the launcher node itself resolves (interpolations into trainer.devices etc.)
    from omegaconf import OmegaConf

    cfg = compose_config(
        [f"hydra/launcher={launcher}", "+experiment=gsr_base", "trainer=ddp", "trainer.devices=4", "experiment_name=x"],
        return_hydra_config=True,
    )
    launch = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    assert launch["_target_"].endswith("SlurmLauncher" if launcher == "slurm" else "LocalLauncher")
    if launcher == "slurm":
        assert cfg.hydra.launcher.gpus_per_node == 4 == cfg.hydra.launcher.tasks_per_node
        assert cfg.hydra.launcher.nodes == 1 and cfg.hydra.launcher.max_num_timeout == 3
        assert "partition" in launch and "mem_gb" in launch and "timeout_min" in launch


def test_aggregate_holds_recall_at_the_compared_ks_and_plots_it(tmp_path):
    from gsr_train.eval.retrieval import RetrievalReport
    from gsr_train.eval.tail import COMPARE_KS, retrieval_row, write_metrics

    overall = {"answer_recall": {10: 0.5, 20: 0.6, 50: 0.8, 100: 0.9, 500: 1.0}, "sp_recall": {10: 0.4, 500: 1.0}}
    report = RetrievalReport(ks=[10, 20, 50, 100, 500], questions=4, overall=overall, counts={})
    for job, k in (("0", 500), ("1", 20)):
        (tmp_path / job).mkdir()
        write_metrics(tmp_path / job, "x", "toy", None, [retrieval_row("m", report, "test", k)])
    rows = aggregate(tmp_path, quiet=True)
    assert rows[0]["K"] == 500 and rows[0]["answer_recall"] == 1.0  # at its own K ...
    assert [rows[0][f"answer_recall@{k}"] for k in COMPARE_KS] == [0.5, 0.6, 0.8, 0.9]  # ... and at the compared Ks
    assert rows[0]["sp_recall@10"] == 0.4 and rows[0].get("sp_recall@20") is None
    assert rows[1]["K"] == 20 and rows[1].get("answer_recall@50") is None  # never above the K kept
    assert (tmp_path / "aggregate_recall.png").read_bytes()[:4] == b"\x89PNG"
