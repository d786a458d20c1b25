"""A run SIGKILLed mid-epoch and restarted with ``resume=auto`` ends exactly like an uninterrupted one.

Real processes (``python train.py``): the uninterrupted run also logs to wandb (offline), so
the same test checks that hyperparameters and final metrics reach the tracker.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import torch

from .conftest import REPO
from .subgraphrag_toy import write_toy

# 24 graphs / 4 per step = 6 steps per epoch, 3 epochs; last.ckpt every 2 steps; killed at step 9
# (epoch 1, batch 3): the resumed run restarts from step 8, in the middle of epoch 1.
STEPS_PER_EPOCH, EPOCHS, KILL_AT = 6, 3, 9


def _run(data, cache, out, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline",
           "PYTHONWARNINGS": "ignore"}
    args = ["+experiment=subgraphrag_quickstart", f"data.dir={data}", "data.name=toy", "encoder.name=hashing",
            "+encoder.dim=32", "model.hidden=32", "model.dropout=0.1", f"model.train.epochs={EPOCHS}",
            "model.train.patience=null", "model.train.graphs_per_batch=4", "subgraphrag.top_k=10",
            "subgraphrag.compare_cosine=false", "checkpoint_every_n_steps=2", "~callbacks.rich_progress",
            "trainer.enable_progress_bar=false", f"paths.cache_dir={cache}", f"hydra.run.dir={out}",
            "experiment_name=resume_test", *extra]
    return subprocess.run([sys.executable, "train.py", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def _weights(path):
    return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]


def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(tmp_path):
    data = write_toy(tmp_path / "data", sizes=(24, 8, 8))
    cache = tmp_path / "cache"
    full, crashed = tmp_path / "full", tmp_path / "crashed"

    proc = _run(data, cache, full, "logger=wandb")
    assert proc.returncode == 0, proc.stderr[-3000:]

    killed = _run(data, cache, crashed, "logger=csv", "+callbacks.kill._target_=tests.scale_helpers.KillAtStep",
                  f"+callbacks.kill.step={KILL_AT}")
    assert killed.returncode == -signal.SIGKILL
    last = crashed / "checkpoints" / "last.ckpt"
    assert last.exists() and not (crashed / "results.json").exists()
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["global_step"] == KILL_AT - 1 and state["epoch"] == 1  # mid-epoch checkpoint
    assert not list((crashed / "checkpoints").glob(".*tmp*"))  # no half-written checkpoint left behind

    resumed = _run(data, cache, crashed, "logger=csv", "resume=auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "skipping the first 2 batches of epoch 1" in resumed.stderr + resumed.stdout

    a = json.loads((full / "results.json").read_text())
    b = json.loads((crashed / "results.json").read_text())
    assert a["training"]["global_step"] == b["training"]["global_step"] == STEPS_PER_EPOCH * EPOCHS
    assert a["metrics"] == b["metrics"] and a["at_k"] == b["at_k"]
    assert a["training"]["best_score"] == b["training"]["best_score"]
    wa, wb = _weights(full / "checkpoints" / "last.ckpt"), _weights(crashed / "checkpoints" / "last.ckpt")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)

    # wandb (offline): one offline run folder whose record log holds the hyperparameters (the
    # composed config), the training curves and the final test metrics
    runs = list((full / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list((full / "wandb").iterdir())
    log = next(runs[0].glob("run-*.wandb")).read_bytes()
    for key in (b"model/hidden", b"subgraphrag/top_k", b"epoch", b"val/sp_recall@",
                b"final/test/answer_recall@10", b"final/test/sp_recall@10"):
        assert key in log, key
