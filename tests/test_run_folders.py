"""Run folders are never shared (two runs started in the same second) and a finished run is
never overwritten by a rerun pointed at its folder."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gsr_train.config import claim_run_dir
from gsr_train.runs.run_folder import RunFolderGuard, mark_finished

from .subgraphrag_toy import write_toy

ROOT = Path(__file__).resolve().parents[1]


def _claim(base, barrier, out):
    barrier.wait()
    out.put(claim_run_dir(base))


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path):
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(8), ctx.Queue()
    base = str(tmp_path / "outputs" / "exp" / "2026-11-24_10-00-00")
    procs = [ctx.Process(target=_claim, args=(base, barrier, out)) for _ in range(8)]
    for p in procs:
        p.start()
    got = sorted(out.get(timeout=30) for _ in procs)
    for p in procs:
        p.join(30)
    assert len(set(got)) == 8
    assert got == sorted([base] + [f"{base}_{i}" for i in range(1, 8)])


def _hydra_cfg(folder, resume=None):
    return OmegaConf.create({"hydra": {"run": {"dir": str(folder)}}, "resume": resume})


def test_guard_stops_a_new_run_in_a_finished_runs_folder(tmp_path, capsys):
    guard = RunFolderGuard()
    guard.on_run_start(_hydra_cfg(tmp_path))  # empty folder: fine
    mark_finished(tmp_path, "subgraphrag_quickstart")
    with pytest.raises(SystemExit) as stop:
        guard.on_run_start(_hydra_cfg(tmp_path))
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} holds a finished run (subgraphrag_quickstart" in err and "resume=auto" in err
    guard.on_run_start(_hydra_cfg(tmp_path, resume="auto"))  # continuing it is allowed


def _train(cwd, *overrides):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "GSR_TRAIN_CACHE": str(cwd / "cache")}
    return subprocess.Popen([sys.executable, str(ROOT / "train.py"), "+experiment=cosine_baseline",
                             f"data.dir={cwd / 'data'}", "data.name=toy", "encoder.name=hashing",
                             "trainer.enable_progress_bar=false", *overrides],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_runs_at_once_and_a_rerun_into_a_finished_folder(tmp_path):
    write_toy(tmp_path / "data", sizes=(8, 4, 6))
    first, second = _train(tmp_path), _train(tmp_path)  # started in the same second
    for p in (first, second):
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        assert "== cosine_baseline finished in" in out and "metrics.json" in out  # the closing summary
    runs = sorted((tmp_path / "outputs" / "cosine_baseline").iterdir())
    assert len(runs) == 2
    for run in runs:
        assert json.loads((run / "run.json").read_text())["status"] == "finished"
        assert (run / "metrics.json").exists()
    kept = (runs[0] / "metrics.json").read_bytes()
    again = _train(tmp_path, f"hydra.run.dir={runs[0]}")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 2 and "holds a finished run" in err and "Traceback" not in err
    assert (runs[0] / "metrics.json").read_bytes() == kept


def test_summary_shows_folder_files_and_table(tmp_path):
    from gsr_train.runs.summary import run_summary

    from gsr_train.eval.tail import write_metrics

    write_metrics(tmp_path, "subgraphrag_quickstart", "toy", None, [],
                  {"tables": {"overall": "| model | sp@10 |\n| x | 0.5 |"}})
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / ".hydra").mkdir()
    text = run_summary(tmp_path, "subgraphrag_quickstart", 75.0)
    assert text.splitlines()[0] == f"== subgraphrag_quickstart finished in 1:15 -> {tmp_path}"
    assert text.splitlines()[1] == "files: checkpoints/, metrics.json"
    assert "| x | 0.5 |" in text
