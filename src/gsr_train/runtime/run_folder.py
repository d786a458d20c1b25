"""One run per folder, however the folder was named, and every folder says what its run did.

- A default folder (``${new_run_dir:...}``) is only a name until the run's options have been checked;
  `RunFolderGuard` then claims it atomically (`gsr_train.config.claim_run_dir`), once.
  A run refused after that (a missing file found by a runner's preflight, an eval.py mistake) takes
  its folder back (`discard_refused`): a refused command leaves no folder. A folder named
  on the command line (``hydra.run.dir=``, ``hydra.sweep.dir=``, interpolated or not) is checked
  by `RunFolderGuard` (a Hydra callback) before Hydra writes anything into it.
- A run holds an exclusive lock on its folder (``.lock``, ``flock``) while it runs, so a second run
  started at the same time on the same folder is refused instead of mixing its files with the
  first's. The run removes ``.lock`` when it ends (finished, failed, stopped by a signal); after a
  ``kill -9`` the file stays, but the system has dropped the lock, so the next run takes it.
- ``run.json`` says what the run did: ``running`` -> ``finished`` | ``interrupted`` (a stop signal;
  ``last.ckpt`` is resumable) | ``failed``. A ``running`` folder nobody holds the lock of is a
  run that was killed.
- A folder that holds a run (or a sweep folder that holds a sweep) takes a new run only to
  continue it (``resume=auto`` or a checkpoint of it); anything else is refused with exit status
  2 before any work. A requeued SLURM job continues its own folder without being asked.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import open_dict, read_write

from gsr_train.config import PROPOSED_RUN_DIRS, RUN_MARKER, claim_run_dir, run_state, slurm_job_tag
from gsr_train.data.errors import PreflightError, UserError
from gsr_train.eval.schema import METRICS_FILE
from gsr_train.io import write_json

MARKER = RUN_MARKER
LOCK = ".lock"
SWEEP_MARKERS = ("multirun.yaml", "aggregate.csv", "aggregate.md")

if TYPE_CHECKING:  # the fallback below is for running without Hydra only
    from hydra.experimental.callback import Callback as _HydraCallback
else:
    try:
        from hydra.experimental.callback import Callback as _HydraCallback
    except ImportError:  # pragma: no cover - hydra is a dependency
        _HydraCallback = object


class RunFolderError(UserError, ValueError):
    """The folder cannot take this run (in use, or holding another run): the user's to fix."""


def finished_run(folder: str | Path) -> dict | None:
    """The ``run.json`` of a finished run in ``folder``, or None."""
    state = run_state(folder)
    return state if state and state.get("status") == "finished" else None


# The variables a process's global rank is read from, the first one set winning: Lightning's own
# order (lightning_fabric.utilities.rank_zero), read here without importing Lightning, which takes
# seconds: Hydra makes this guard before a refusal that must answer in well under a second.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def process_rank() -> int:
    """This process's global rank in a distributed run (0 when none is set)."""
    return next((int(os.environ[key]) for key in RANK_VARIABLES if os.environ.get(key) is not None), 0)


def launching_process() -> bool:
    """False in the extra processes of a distributed run (Lightning's DDP ranks > 0, other SLURM
    tasks), which run in the folder rank 0 claimed."""
    return process_rank() == 0


def check_resume_target(cfg: Any, out: str | Path | None = None) -> None:
    """``resume=<file>`` must be an existing checkpoint of the run folder ``out`` (default: the run's
    ``paths.output_dir``; see `gsr_train.runtime.training.resume_path`)."""
    want = cfg.get("resume")
    if not want or str(want) == "auto":
        return
    path = Path(str(want))
    if not path.is_file():
        raise PreflightError(f"resume={want} does not exist")
    run = path.resolve().parent.parent if path.parent.name == "checkpoints" else path.resolve().parent
    out = Path(str(cfg.paths.output_dir if out is None else out)).resolve()
    if run != out:
        raise PreflightError(
            f"resume={want} belongs to the run folder {run}, but this run writes to {out}: "
            f"continue that run in its own folder with hydra.run.dir={run} resume=auto"
        )


# ------------------------------------------------------------------ the lock
_HELD: dict[str, int] = {}


def _holder(folder: Path) -> str:
    state = run_state(folder) or {}
    who = ", ".join(f"{k} {state[k]}" for k in ("pid", "host", "started_at") if state.get(k))
    return f" ({who})" if who else ""


def lock_folder(folder: str | Path, kind: str = "run") -> None:
    """Hold ``folder``'s lock until `release_folder` (or the end of this process);
    RunFolderError if another process holds it."""
    path = Path(folder)
    key = str(path.resolve())
    if key in _HELD:
        return
    path.mkdir(parents=True, exist_ok=True)
    for _ in range(100):  # the holder may remove .lock between our open and our flock: lock the file there now
        fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunFolderError(
                f"{path} is in use by another run{_holder(path)}; wait for it, or pick another "
                f"folder (leave hydra.{kind}.dir unset for a new one)"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path / LOCK).st_ino
        except FileNotFoundError:
            same = False
        if same:
            _HELD[key] = fd
            return
        os.close(fd)
    raise RunFolderError(f"{path}: could not lock {LOCK} (other runs keep replacing it)")


def release_folder(folder: str | Path) -> None:
    """Drop ``folder``'s lock and remove its ``.lock`` (the run has ended)."""
    key = str(Path(folder).resolve())
    fd = _HELD.pop(key, None)
    if fd is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(Path(key) / LOCK)  # while still locked: a run waiting on it re-opens the new file
        os.close(fd)


@atexit.register
def release_all() -> None:
    """Every lock this process still holds (a sweep folder, a run refused before its runner)."""
    for key in list(_HELD):
        release_folder(key)


# ------------------------------------------------------------------ a refused run takes its folder back
_MADE: dict[str, Path] = {}  # folders claimed new by this process -> the highest folder the claim made
KEPT_BY_REFUSAL = {".hydra", LOCK, MARKER, "eval.json"}  # what a run writes before its work starts


def claim_new(base: str) -> str:
    """Make the run folder proposed for ``base`` (`gsr_train.config.claim_run_dir`), remembering
    what was made so that a refused run can remove it again."""
    path = Path(base).resolve()
    top = path  # the highest folder this claim makes
    while not top.parent.exists():
        top = top.parent
    existing = {p for p in (path.parent.iterdir() if path.parent.exists() else ())}
    folder = claim_run_dir(base)
    made = Path(folder).resolve()
    if made not in existing:  # not a requeued SLURM job's folder
        _MADE[str(made)] = made if top == path else top
    return folder


def discard_refused() -> list[str]:
    """Remove the folders this process made for a run that was then refused (a user's error found
    after the folder was claimed): only while one holds nothing but what a run writes before its
    work (``.hydra/``, logs, ``run.json``, ``eval.json``); empty parents the claim made go too."""
    removed = []
    for key, top in list(_MADE.items()):
        folder = Path(key)
        if not folder.is_dir() or any(p.name not in KEPT_BY_REFUSAL and p.suffix != ".log" for p in folder.iterdir()):
            continue
        release_folder(folder)
        _close_log_files(folder)
        shutil.rmtree(folder, ignore_errors=True)
        parent = folder.parent
        while parent != top.parent and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
        del _MADE[key]
        removed.append(key)
    return removed


def _close_log_files(folder: Path) -> None:
    """Close the logging handlers writing into ``folder`` (Hydra's job log)."""
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in list(getattr(logger, "handlers", [])):
            name = getattr(handler, "baseFilename", None)
            if name and Path(name).resolve().is_relative_to(folder):
                handler.close()
                logger.removeHandler(handler)  # type: ignore[union-attr]


# ------------------------------------------------------------------ what a folder holds
def _holds_run(folder: Path) -> bool:
    ckpts = folder / "checkpoints"
    return (folder / MARKER).exists() or (folder / "metrics.json").exists() or (ckpts.is_dir() and any(ckpts.iterdir()))


def _holds_sweep(folder: Path) -> bool:
    if any((folder / m).exists() for m in SWEEP_MARKERS):
        return True
    return any(p.is_dir() and _holds_run(p) for p in folder.iterdir()) if folder.is_dir() else False


def _locked_elsewhere(folder: Path) -> bool:
    """Another process holds ``folder``'s lock (its run is alive)."""
    if str(folder.resolve()) in _HELD or not (folder / LOCK).exists():
        return False
    fd = os.open(folder / LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def run_status(folder: str | Path) -> str | None:
    """What the run in ``folder`` did: finished, interrupted, failed, running (alive), killed (a
    ``running`` mark nobody holds: kill -9, a crash of the machine), or None (no run.json)."""
    path = Path(folder)
    state = run_state(path)
    if state is None:
        return None
    status = str(state.get("status"))
    return "killed" if status == "running" and not _locked_elsewhere(path) else status


def unfinished(folder: str | Path, lacking: str) -> str | None:
    """Why the run in ``folder`` has no ``lacking`` file when it did not finish (killed, failed,
    interrupted, still running): one line saying so and how to continue it; None otherwise."""
    if (Path(folder) / lacking).is_file():
        return None
    status = run_status(folder)
    if status in (None, "finished"):
        return None
    return (
        f"{folder}: that run did not finish (status: {status}), so it wrote no {lacking}; continue it with: "
        f"python train.py hydra.run.dir={folder} resume=auto (plus its own overrides)"
    )


def unscored(folder: str | Path) -> str | None:
    """Why ``folder`` has no ``metrics.json``: a run that did not finish (how to continue it), or no
    run folder at all; None when it has one."""
    if (Path(folder) / METRICS_FILE).is_file():
        return None
    return unfinished(folder, METRICS_FILE) or (
        f"{folder}: no {METRICS_FILE} (not a run folder written by train.py or eval.py)"
    )


def describe(folder: Path) -> str:
    state = run_state(folder)
    if state is None:
        return "an earlier run"
    when = state.get("finished_at") or state.get("stopped_at") or state.get("started_at")
    return f"a {run_status(folder)} run ({state.get('experiment')}, {when})"


def own_slurm_job(folder: Path) -> bool:
    """The folder's run is an earlier attempt of this very SLURM job (it was requeued)."""
    job = slurm_job_tag()
    return job is not None and (run_state(folder) or {}).get("slurm_job") == job


# ------------------------------------------------------------------ claiming
def claim(folder: str | Path, resume: Any, kind: str = "run") -> str:
    """Lock ``folder`` for this run and say what it starts from: ``new``, ``resume`` (an unfinished
    run to continue) or ``finished`` (a finished run; only with ``resume``). Claiming again in the
    process that holds the folder (the Hydra callback, then the runner) gives the same answer:
    nothing writes ``run.json`` between the two."""
    path = Path(folder)
    lock_folder(path, kind)
    holds = _holds_sweep(path) if kind == "sweep" else _holds_run(path)
    if not holds:
        answer = "new"
    elif kind == "run" and finished_run(path) is not None:
        answer = "finished" if resume else ""
    else:
        answer = "resume" if resume or own_slurm_job(path) else ""
    if not answer:
        release_folder(path)
        what = "an earlier sweep" if kind == "sweep" else describe(path)
        raise RunFolderError(
            f"{path} holds {what}; a new {kind} would overwrite it. Leave hydra.{kind}.dir unset for a new "
            f"folder, pick another one, or continue it with resume=auto"
        )
    return answer


def mark(folder: str | Path, status: str, experiment: Any = None, **extra: Any) -> None:
    """Write ``run.json`` (atomically), keeping what earlier attempts recorded (start, attempts)."""
    path = Path(folder)
    state = run_state(path) or {}
    now = time.strftime("%Y-%m-%d %H:%M:%S")
    if status == "running":
        state.update(
            {
                "started_at": now,
                "attempts": int(state.get("attempts", 0)) + 1,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "command": " ".join(sys.argv),
            }
        )
        state.pop("finished_at", None)
        state.pop("stopped_at", None)
        job = slurm_job_tag()
        if job:
            state["slurm_job"] = job
    elif status == "finished":
        state["finished_at"] = now
    else:
        state["stopped_at"] = now
    state.update({"status": status, **({"experiment": experiment} if experiment is not None else {}), **extra})
    try:
        write_json(path / MARKER, state)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT) or not (path / MARKER).is_file():
            raise
        _rewrite_in_place(path / MARKER, state)


def _rewrite_in_place(file: Path, state: dict) -> None:
    """``run.json`` on a full disk: the atomic way needs room for a second copy, but truncating the
    file frees its blocks for the new text, so a failed run still says so (not ``running``)."""
    text = json.dumps({k: (v[:300] if isinstance(v, str) else v) for k, v in state.items()}).encode()
    fd = os.open(file, os.O_WRONLY)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, text)
        os.fsync(fd)
    finally:
        os.close(fd)


def mark_finished(folder: str | Path, experiment: Any) -> None:
    mark(folder, "finished", experiment)


class RunFolderGuard(_HydraCallback):
    """Hydra callback: claim the run folder (``on_run_start``) or the sweep folder
    (``on_multirun_start``) before Hydra writes into it; a refusal is one message and exit 2."""

    def on_run_start(self, config, **kwargs: Any) -> None:
        self._claim(config, "run")

    def on_multirun_start(self, config, **kwargs: Any) -> None:
        self._claim(config, "sweep")

    @staticmethod
    def _claim(config, kind: str) -> None:
        if not launching_process():
            return
        folder = str(config.hydra[kind].dir)
        base = PROPOSED_RUN_DIRS.get(folder)
        if base is not None:  # a default folder: made now, under the name free now
            folder = claim_new(base)
            with read_write(config.hydra), open_dict(config.hydra):
                config.hydra[kind].dir = folder
        try:
            claim(folder, config.get("resume"), kind)
        except RunFolderError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
