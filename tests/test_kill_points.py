"""A run stopped at any point (kill -9, Ctrl-C, SIGTERM; before the first checkpoint, mid-epoch,
during validation, after training, during test retrieval) and continued with ``resume=auto``
ends exactly like an uninterrupted run: same metrics, same step count, same final weights.

Real processes and real signals: ``tests/signal_at.py`` runs ``train.py`` and sends the process a
signal when a chosen function is called for the N-th time. The run folder is the one the
resume line of docs/how-to/resume.md names (``hydra.run.dir=<run> resume=auto``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from .conftest import REPO, offline_env, quiet
from .subgraphrag_toy import write_toy

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# 24 graphs / 4 per step = 6 steps per epoch, 3 epochs, last.ckpt every 2 steps, early stopping on
# (patience 5: it never stops this run, but its state must survive every resume)
ARGS = [
    "+experiment=subgraphrag_quickstart",
    "data.name=toy",
    "encoder.name=hashing",
    "+encoder.dim=32",
    "model.hidden=32",
    "model.dropout=0.1",
    "model.train.epochs=3",
    "model.train.patience=5",
    "model.train.graphs_per_batch=4",
    "top_k=10",
    "subgraphrag.compare_cosine=false",
    "checkpoint_every_n_steps=2",
    *quiet("csv"),
    "experiment_name=kill_test",
]

POINTS = {
    "first step": "gsr_train.runtime.checkpoints:LastCheckpoint.on_train_batch_end 1",  # before any checkpoint
    "mid-epoch": "gsr_train.runtime.checkpoints:LastCheckpoint.on_train_batch_end 9",
    "validation": "gsr_train.models.subgraphrag.module:SubgraphRAGModule.validation_step 1",
    "best saved": "pytorch_lightning.callbacks:ModelCheckpoint.on_validation_end 2",  # before the epoch-end write
    "after training": "gsr_train.retrievers.edge_training:fit_state 1",
    "test retrieval": "gsr_train.retrievers.subgraphrag:SubgraphRAGRetriever.score_split 1",
}
CASES = [
    ("first step", "KILL"),
    ("first step", "TERM"),
    ("mid-epoch", "INT"),
    ("validation", "TERM"),
    ("validation", "KILL"),
    ("best saved", "KILL"),
    ("after training", "INT"),
    ("after training", "KILL"),
    ("test retrieval", "TERM"),
    ("test retrieval", "KILL"),
]


def _env(cache):
    return offline_env(cache, quiet=True)


def _train(root, out, *extra, signal_at: list[str] | None = None) -> subprocess.CompletedProcess:
    prefix = ["-m", "tests.signal_at", *signal_at] if signal_at else []
    cmd = [sys.executable, *prefix, "train.py", *ARGS, f"data.dir={root / 'data'}", f"hydra.run.dir={out}", *extra]
    return subprocess.run(cmd, cwd=REPO, env=_env(root / "cache"), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill_points")
    write_toy(root / "data", sizes=(24, 8, 8))
    done = _train(root, root / "full")
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def _weights(path):
    return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]


@pytest.mark.parametrize("point,sig", CASES, ids=[f"{p}-{s}" for p, s in CASES])
def test_stop_anywhere_then_resume_matches_uninterrupted(uninterrupted, point, sig):
    root = uninterrupted
    run = root / f"{point.replace(' ', '_')}-{sig}"
    target, nth = POINTS[point].split()
    stopped = _train(root, run, signal_at=[target, nth, sig])
    signum = getattr(signal, f"SIG{sig}")
    state = json.loads((run / "run.json").read_text())
    assert not (run / "metrics.json").exists()
    if sig == "KILL":
        assert stopped.returncode == -signum
        assert state["status"] == "running"  # what a killed run leaves; the lock it held is gone
        assert (run / ".lock").exists()  # the file stays (kill -9); the resume below takes it over
    else:  # a handled stop: exit 128 + signal, folder marked, the way back printed
        assert stopped.returncode == 128 + signum, stopped.stderr[-3000:]
        assert state["status"] == "interrupted" and state["signal"] == f"SIG{sig}"
        assert "Traceback" not in stopped.stderr
        assert not (run / ".lock").exists()  # the run removed its lock when it stopped
        assert f"hydra.run.dir={run} resume=auto" in stopped.stderr
        if point in ("first step", "mid-epoch"):  # stopped at the step boundary, after writing last.ckpt
            assert state["checkpoint"] == str(run / "checkpoints" / "last.ckpt")

    if (point, sig) == ("best saved", "KILL"):  # eval.py on the killed run says what it scores
        scored = subprocess.run(
            [
                sys.executable,
                "eval.py",
                f"ckpt_path={run}",
                f"data.dir={root / 'data'}",
                f"hydra.run.dir={run}_eval",
                "~callbacks.rich_progress",
                "logger=none",
            ],
            cwd=REPO,
            env=_env(root / "cache"),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert scored.returncode == 0, scored.stderr[-3000:]
        assert f"evaluating {run / 'checkpoints' / 'best-00.ckpt'}" in scored.stderr, scored.stderr[-3000:]
        assert "that run did not finish (status: killed)" in scored.stderr
        assert json.loads((run.parent / f"{run.name}_eval" / "eval.json").read_text())["source_status"] == "killed"

    again = _train(root, run)  # the same command without resume: refused, the folder untouched
    assert again.returncode == 2 and "resume=auto" in again.stderr and "Traceback" not in again.stderr

    resumed = _train(root, run, "resume=auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    assert not (run / ".lock").exists()
    a = json.loads((root / "full" / "metrics.json").read_text())
    b = json.loads((run / "metrics.json").read_text())
    assert a["training"]["global_step"] == b["training"]["global_step"] == 18
    assert a["metrics"] == b["metrics"] and a["at_k"] == b["at_k"]
    assert a["training"]["best_score"] == b["training"]["best_score"]
    assert os.path.basename(a["checkpoint"]) == os.path.basename(b["checkpoint"])  # the same best epoch
    wa, wb = _weights(root / "full" / "checkpoints" / "last.ckpt"), _weights(run / "checkpoints" / "last.ckpt")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_ctrl_c_during_the_index_build_then_resume(tmp_path):
    """Outside training a signal stops the run at once (every cache is written atomically); the
    resumed run continues the index build from its ``.partial`` folder."""
    write_toy(tmp_path / "data", sizes=(24, 8, 8))
    run = tmp_path / "run"
    stopped = _train(tmp_path, run, signal_at=["gsr_train.kg.index_build:_SplitWriter.append", "2", "INT"])
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    assert list((tmp_path / "cache" / "kg_index").glob(".*.partial"))  # the build stopped half way
    resumed = _train(tmp_path, run, "resume=auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming the KG index build" in resumed.stdout + resumed.stderr
    assert json.loads((run / "metrics.json").read_text())["training"]["global_step"] == 18
