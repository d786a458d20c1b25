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
from gsr_train.runtime.run_folder import RunFolderGuard, mark_finished

from .conftest import offline_env, quiet, run_train, slurm_job
from .subgraphrag_toy import toy_quickstart_args, write_toy

pytestmark = [pytest.mark.integration, pytest.mark.slow]

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


def _train(cwd, *overrides, flags=()):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "GSR_TRAIN_CACHE": str(cwd / "cache")}
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            *flags,
            "+experiment=cosine_baseline",
            f"data.dir={cwd / 'data'}",
            "data.name=toy",
            "encoder.name=hashing",
            "trainer.enable_progress_bar=false",
            *overrides,
        ],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


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
        assert not (run / ".lock").exists()  # removed when the run ended
    kept = (runs[0] / "metrics.json").read_bytes()
    again = _train(tmp_path, f"hydra.run.dir={runs[0]}")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 2 and "holds a finished run" in err and "Traceback" not in err
    assert (runs[0] / "metrics.json").read_bytes() == kept


def test_summary_shows_folder_files_and_table(tmp_path):
    from gsr_train.eval.tail import write_metrics
    from gsr_train.runtime.summary import run_summary

    write_metrics(
        tmp_path, "subgraphrag_quickstart", "toy", None, [], {"tables": {"overall": "| model | sp@10 |\n| x | 0.5 |"}}
    )
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / ".hydra").mkdir()
    text = run_summary(tmp_path, "subgraphrag_quickstart", 75.0)
    assert text.splitlines()[0] == f"== subgraphrag_quickstart finished in 1:15 -> {tmp_path}"
    assert text.splitlines()[1] == "files: checkpoints/, metrics.json"
    assert "| x | 0.5 |" in text


def test_interpolated_run_folder_is_guarded_too(tmp_path):
    write_toy(tmp_path / "data", sizes=(8, 4, 6))
    folder = "outputs/${experiment_name}/fixed"  # resolved by Hydra, not by the shell
    first = _train(tmp_path, f"hydra.run.dir={folder}")
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]
    assert "Callback RunFolderGuard" not in err  # the guard ran (it once failed on this interpolation)
    run = tmp_path / "outputs" / "cosine_baseline" / "fixed"
    kept = (run / "metrics.json").read_bytes()
    again = _train(tmp_path, f"hydra.run.dir={folder}")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 2 and f"{run.relative_to(tmp_path)} holds a finished run" in err, err[-2000:]
    assert (run / "metrics.json").read_bytes() == kept


def test_two_runs_started_at_once_in_one_named_folder(tmp_path):
    """One of them runs; the other is refused before Hydra writes into the folder, so the folder's
    overrides and results come from the same run."""
    write_toy(tmp_path / "data", sizes=(8, 4, 6))
    run = tmp_path / "shared_run"
    procs = {k: _train(tmp_path, f"hydra.run.dir={run}", f"top_k={k}", "eval_ks=[5,20]") for k in (5, 20)}
    codes = {}
    for k, p in procs.items():
        _, err = p.communicate(timeout=300)
        codes[k] = (p.returncode, err)
    assert sorted(c for c, _ in codes.values()) == [0, 2], {k: (c, e[-1500:]) for k, (c, e) in codes.items()}
    winner = next(k for k, (c, _) in codes.items() if c == 0)
    loser_err = next(e for c, e in codes.values() if c == 2)
    assert "is in use by another run" in loser_err or "holds a finished run" in loser_err, loser_err[-2000:]
    assert "Traceback" not in loser_err
    overrides = (run / ".hydra" / "overrides.yaml").read_text()
    assert f"top_k={winner}" in overrides and f"top_k={25 - winner}" not in overrides
    assert json.loads((run / "metrics.json").read_text())["rows"][0]["k"] == winner


def test_a_requeued_slurm_job_continues_its_own_folder(tmp_path):
    """SLURM's warning signal (``--signal=USR1@90``) mid-epoch: last.ckpt written at the next step,
    the folder marked interrupted, ``scontrol requeue <job>`` called, exit 138. The requeued job
    (same job id, same command, no resume option) continues in ``slurm-<job id>`` and finishes."""
    from .subgraphrag_toy import write_toy as toy

    data = toy(tmp_path / "data", sizes=(24, 8, 8))
    slurm, calls = slurm_job(tmp_path, "4242", "train")
    env = offline_env(tmp_path / "cache", quiet=True, **slurm)
    args = ["train.py", *toy_quickstart_args(data), "subgraphrag.compare_cosine=false", *quiet("csv")]

    def job(*prefix):
        return subprocess.run(
            [sys.executable, *prefix, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )

    for script in ("train.py",):
        (tmp_path / script).symlink_to(ROOT / script)
    (tmp_path / "conf").symlink_to(ROOT / "conf")
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    first = job("-m", "tests.signal_at", "gsr_train.runtime.checkpoints:LastCheckpoint.on_train_batch_end", "3", "USR1")
    assert first.returncode == 128 + 10, first.stderr[-3000:]
    run = tmp_path / "outputs" / "subgraphrag_quickstart" / "slurm-4242"
    state = json.loads((run / "run.json").read_text())
    assert state["status"] == "interrupted" and state["signal"] == "SIGUSR1" and state["requeue"] == "requeued"
    assert state["slurm_job"] == "4242" and (run / "checkpoints" / "last.ckpt").exists()
    assert calls.read_text().split() == ["requeue", "4242"]

    second = job()  # what SLURM runs again after the requeue
    assert second.returncode == 0, second.stderr[-3000:]
    assert "requeued SLURM job: continuing the run in" in second.stderr + second.stdout
    state = json.loads((run / "run.json").read_text())
    assert state["status"] == "finished" and state["attempts"] == 2
    assert json.loads((run / "metrics.json").read_text())["training"]["global_step"] == 12
    assert len(list((tmp_path / "outputs" / "subgraphrag_quickstart").iterdir())) == 1


def test_two_sweeps_started_at_once_in_one_sweep_folder(tmp_path):
    write_toy(tmp_path / "data", sizes=(8, 4, 6))
    sweep = tmp_path / "sweep"
    procs = [_train(tmp_path, "top_k=5,20", f"hydra.sweep.dir={sweep}", flags=["-m"]) for _ in range(2)]
    results = [(p.returncode, err) for p in procs for _, err in [p.communicate(timeout=300)]]
    assert sorted(code for code, _ in results) == [0, 2], [e[-1500:] for _, e in results]
    refused = next(err for code, err in results if code == 2)
    assert (
        "is in use by another run" in refused and "hydra.sweep.dir" in refused
    ) or "holds an earlier sweep" in refused
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")) == ["0", "1"]


def test_resume_from_a_damaged_checkpoint_is_refused_before_any_work(tmp_path):
    """A last.ckpt cut short (a copy that stopped, a full disk elsewhere): one line naming it and
    the other checkpoint to continue from, before the index, embeddings or training."""
    from .subgraphrag_toy import toy_run_overrides

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"PK\x03\x04 cut short")
    (run / "checkpoints" / "best-00.ckpt").write_bytes(b"")
    (run / "run.json").write_text(json.dumps({"status": "running", "experiment": "subgraphrag_quickstart"}))
    args = [o for o in toy_run_overrides(tmp_path) if not o.startswith(("paths.output_dir", "experiment_name"))]
    done = run_train([*args, f"hydra.run.dir={run}", "resume=auto"], tmp_path, offline_env(tmp_path / "cache"))
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"error: {run / 'checkpoints' / 'last.ckpt'} cannot be read" in done.stderr
    assert f"resume={run / 'checkpoints' / 'best-00.ckpt'}" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "cache" / "kg_index").exists()  # stopped before any data work
