"""Resuming continues the run in its own folder, and the evaluated checkpoint is the best of
the whole run (all epochs before and after the resume), not of the resumed part only."""

from __future__ import annotations

import csv
import json

import torch

from .conftest import compose_config
from .subgraphrag_toy import toy_run_overrides


def _val_scores(run):
    scores = {}
    for path in sorted((run / "csv").rglob("metrics.csv")):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                value = next((v for k, v in row.items() if k.startswith("val/sp_recall@") and v), None)
                if value:
                    scores[int(row["epoch"])] = float(value)
    return scores


def test_resume_auto_evaluates_the_best_checkpoint_of_all_epochs(tmp_path):
    from gsr_train.runs.subgraphrag import run

    settings = {"logger": "csv", "model.train.patience": 0, "model.train.optim.lr": 0.05}
    run(compose_config(toy_run_overrides(tmp_path, settings={**settings, "model.train.epochs": 2})))
    first = json.loads((tmp_path / "run" / "metrics.json").read_text())
    figures = run(
        compose_config(toy_run_overrides(tmp_path, settings={**settings, "model.train.epochs": 5, "resume": "auto"}))
    )
    scores = _val_scores(tmp_path / "run")
    assert sorted(scores) == [0, 1, 2, 3, 4]  # two epochs, then three more in the same folder
    best_epoch = max(scores, key=lambda e: (scores[e], -e))
    ckpt = torch.load(figures["checkpoint"], map_location="cpu", weights_only=False)
    assert ckpt["epoch"] == best_epoch, (scores, figures["checkpoint"])
    assert figures["training"]["best_score"] == max(scores.values())
    assert figures["training"]["global_step"] > first["training"]["global_step"]
