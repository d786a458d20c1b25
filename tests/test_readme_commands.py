"""The docs' sweep, resume, SLURM and GPU commands run exactly as written.

The commands are read from the pages themselves (docs/how-to/sweep.md, docs/how-to/resume.md,
docs/how-to/slurm.md, docs/how-to/gpus.md), so the test follows the text: each runs in a fresh
folder (what a user's checkout would be: ``train.py`` and ``conf/`` of this repository) with only
``<time>`` replaced by the folder the command before it made. A kill is a real signal sent to the
real process; SLURM is its environment and a recording ``scontrol``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import REPO, slurm_job
from .doc_blocks import block

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _block(page: str, marker: str) -> list[str]:
    found = block(page, marker)
    lines = [line.strip() for line in found.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line and not line.startswith("#")] if "#SBATCH" not in found else lines


@pytest.fixture(scope="module")
def cache(user_cache):
    """The pages' commands run one after another on one machine: they share the user's cache."""
    return user_cache


def _checkout(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("train.py", "eval.py", "conf", "bench"):
        (folder / name).symlink_to(REPO / name)
    return folder


def _env(cache: Path, **extra: str) -> dict:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
        "GSR_TRAIN_CACHE": str(cache),
        **extra,
    }


def _argv(line: str, cwd: Path) -> list[str]:
    """``python`` is this interpreter, ``gsr-train`` its console script; ``<time>`` the one folder
    the commands before made under the path given."""

    def fill(word: str) -> str:
        if "<time>" in word:
            head, _, tail = word.partition("=") if "=" in word.split("<time>")[0] else ("", "", word)
            parent = cwd / tail.split("<time>")[0]
            made = sorted(p.name for p in parent.iterdir() if p.is_dir())
            assert len(made) == 1, made
            tail = tail.replace("<time>", made[0])
            return f"{head}={tail}" if head else tail
        return word

    words = [fill(w) for w in shlex.split(line)]
    if words[0] == "python":
        words[0] = sys.executable
    elif words[0] == "gsr-train":
        words[0] = str(Path(sys.executable).parent / "gsr-train")
    return words


def _run(line: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(_argv(line, cwd), cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def test_readme_sweeps(tmp_path, cache):
    cwd = _checkout(tmp_path / "checkout")
    k_sweep, size_sweep, rebuild = _block("docs/how-to/sweep.md", "-m +experiment=cosine_baseline")
    for line in (k_sweep, size_sweep, rebuild):
        done = _run(line, cwd, _env(cache))
        assert done.returncode == 0, (line, done.stderr[-3000:])
    k_table = next((cwd / "multirun" / "cosine_baseline").iterdir()) / "aggregate.md"
    size_table = next((cwd / "multirun" / "subgraphrag_quickstart").iterdir()) / "aggregate.md"
    assert "| top_k |" in k_table.read_text() and k_table.read_text().count("| cosine-parts |") == 2
    assert "| model.hidden |" in size_table.read_text() and size_table.read_text().count("| subgraphrag |") == 2
    # recall at the Ks methods are compared at, next to the run's own K, and one plot of them
    assert "| answer_recall@10 |" in size_table.read_text()
    plot = size_table.parent / "aggregate_recall.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert to_rows(done.stdout) == 2  # gsr-train aggregate printed the K sweep's table


def to_rows(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith("| ") and "cosine-parts" in line)


def _stop_when(proc: subprocess.Popen, path_glob: str, cwd: Path, signum: int, timeout: float = 600) -> Path:
    """Send ``signum`` to ``proc`` once a file matching ``path_glob`` exists (its run folder)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        found = list(cwd.glob(path_glob))
        if found:
            proc.send_signal(signum)
            return found[0].parents[1]
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    raise AssertionError(f"nothing matched {path_glob} in {timeout} s")


def test_readme_ctrl_c_then_resume(tmp_path, cache):
    cwd = _checkout(tmp_path / "checkout")
    start, resume = _block("docs/how-to/resume.md", "resume=auto")
    proc = subprocess.Popen(
        _argv(start, cwd), cwd=cwd, env=_env(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    run = _stop_when(proc, "outputs/subgraphrag_quickstart/*/checkpoints/last.ckpt", cwd, signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    state = json.loads((run / "run.json").read_text())
    assert state["status"] == "interrupted" and state["signal"] == "SIGINT"
    expected = " ".join(_argv(resume, cwd)[1:])
    assert f"continue it with: python {expected}" in err  # the line printed is the docs' line
    done = _run(resume, cwd, _env(cache))
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads((run / "run.json").read_text())
    assert state["status"] == "finished" and state["attempts"] == 2
    assert json.loads((run / "metrics.json").read_text())["training"]["global_step"] > 500


def test_readme_slurm_job_is_requeued_and_continues(tmp_path, cache):
    cwd = _checkout(tmp_path / "checkout")
    script = _block("docs/how-to/slurm.md", "#SBATCH")
    assert "#SBATCH --signal=USR1@90" in script and "#SBATCH --requeue" in script
    srun = next(line for line in script if line.startswith("srun "))
    command = srun[len("srun ") :]  # srun starts the task; its SLURM environment is given below
    slurm, calls = slurm_job(tmp_path, "777", "gsr-quickstart")
    env = _env(cache, **slurm)
    proc = subprocess.Popen(
        _argv(command, cwd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    run = _stop_when(proc, "outputs/subgraphrag_quickstart/slurm-777/checkpoints/last.ckpt", cwd, signal.SIGUSR1)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGUSR1, err[-3000:]
    assert calls.read_text().split() == ["requeue", "777"]
    assert json.loads((run / "run.json").read_text())["requeue"] == "requeued"
    again = _run(command, cwd, env)  # the requeued job runs the same script
    assert again.returncode == 0, again.stderr[-3000:]
    state = json.loads((run / "run.json").read_text())
    assert state["status"] == "finished" and state["attempts"] == 2 and state["slurm_job"] == "777"
    assert [p.name for p in (cwd / "outputs" / "subgraphrag_quickstart").iterdir()] == ["slurm-777"]


def test_readme_gpu_commands(tmp_path, cache):
    """Where CUDA is visible the GPU lines train (and four GPUs or a clear refusal); elsewhere each is
    one line, exit 2, before any work. The dry run of the GPU check runs here whole."""
    import torch

    cwd = _checkout(tmp_path / "checkout")
    one_gpu, four_gpus, check, dry_run = _block("docs/how-to/gpus.md", "bench/gpu_check.py")
    env = _env(cache, GSR_GPU_CHECK_DIR=str(tmp_path / "gpu_check"))
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for line, needs in ((one_gpu, 1), (four_gpus, 4)):
        done = _run(line, cwd, env)
        if visible >= needs:
            assert done.returncode == 0, (line, done.stderr[-3000:])
            continue
        assert done.returncode == 2 and "Traceback" not in done.stderr, (line, done.stderr[-3000:])
        error = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
        assert len(error) == 1 and ("no CUDA device is visible" in error[0] or "CUDA device visible" in error[0])
        assert not (cwd / "outputs").exists() or not list((cwd / "outputs").rglob("metrics.json"))
    if not visible:
        done = _run(check, cwd, env)
        assert done.returncode == 2 and "--device cpu dry-runs" in done.stderr, done.stderr[-3000:]
    done = _run(dry_run, cwd, env)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    doc = json.loads((tmp_path / "gpu_check" / "gpu_check.json").read_text())
    assert doc["limits"]["inference"] == 4 * 90  # a dry run's limits: 4x the GPU's (a loaded CPU is slow)
    assert {name: st["status"] for name, st in doc["stages"].items()} == dict.fromkeys(doc["stages"], "ok")
    lane = doc["stages"]["lane"]["figures"]
    assert lane["passed"] >= 20 and not lane["failed"]  # the lane's code, dry-run on the CPU
    assert doc["stages"]["scale"]["figures"]["200k"]["gnn"]["seconds"] > 0
