"""Loggers as config choices: wandb works offline and records the config and the final metrics."""
from __future__ import annotations

import warnings

import pytest

from .conftest import REPO
from .subgraphrag_toy import write_toy

pytestmark = pytest.mark.usefixtures("one_thread")


def _run(tmp_path, logger: str):
    from hydra import compose, initialize_config_dir

    from gsr_train.config import register_resolvers
    from gsr_train.runs.common import finish_trackers
    from gsr_train.runs.subgraphrag import run

    register_resolvers()
    data = write_toy(tmp_path / "data", sizes=(12, 4, 4))
    overrides = ["+experiment=subgraphrag_quickstart", f"data.dir={data}", "data.name=toy",
                 "encoder.name=hashing", "+encoder.dim=32", "model.hidden=16", "model.train.epochs=1",
                 "model.train.graphs_per_batch=4", f"logger={logger}", "~callbacks.rich_progress",
                 "trainer.enable_progress_bar=false", f"paths.cache_dir={tmp_path / 'cache'}",
                 f"paths.output_dir={tmp_path / 'run'}", "experiment_name=toy_logging"]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figures = run(cfg)
        finish_trackers()
    return figures


def test_wandb_offline_run_records_config_and_final_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "run"))
    _run(tmp_path, "wandb")
    runs = sorted((tmp_path / "run").rglob("offline-run-*"))
    assert runs, "no offline wandb run folder was written"
    # an offline run keeps every record (config, history, summary) in its .wandb file until `wandb sync`
    records = b"".join(p.read_bytes() for p in runs[-1].glob("run-*.wandb"))
    assert b"toy_logging" in records and b"hidden" in records  # the composed config as hyperparameters
    assert b"final/test/answer_recall@10" in records  # the final metrics

def test_csv_logger_writes_hyperparameters_and_metrics(tmp_path):
    _run(tmp_path, "csv")
    hparams = sorted((tmp_path / "run").rglob("hparams.yaml"))
    metrics = sorted((tmp_path / "run").rglob("metrics.csv"))
    assert hparams and metrics
    assert "toy_logging" in hparams[-1].read_text()
    assert "final/" in metrics[-1].read_text()
