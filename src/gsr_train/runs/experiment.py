"""One run from start to end: check the options, claim the run folder, seed, call the experiment's
runner (a name in `gsr_train.runs.runners.RUNNERS`), mark the folder with the outcome, and
turn a stop signal into an interrupted, resumable run; user errors become one line."""

from __future__ import annotations

import logging
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from gsr_train.config import slurm_job_tag
from gsr_train.data.errors import USER_ERROR_EXIT, UserError
from gsr_train.data.errors import report_user_errors as report
from gsr_train.options.check import check_recipe
from gsr_train.runs.runners import runner_of
from gsr_train.runtime.device import check_device, place_encoder, set_matmul_precision
from gsr_train.runtime.interrupts import INTERRUPTS, RunInterrupted, leave_stopped_run, requeue_slurm_job
from gsr_train.runtime.run_data import _LOADED_DATA, output_dir
from gsr_train.runtime.run_folder import claim, discard_refused, launching_process, mark, release_folder, run_state
from gsr_train.runtime.summary import run_summary
from gsr_train.runtime.training import check_readable_checkpoint, is_rank_zero, resume_path

log = logging.getLogger(__name__)


def run_experiment(cfg: DictConfig) -> Any:
    """Check the options, claim the run folder, seed, call the experiment's runner (``cfg.runner``,
    a name in `gsr_train.runs.runners.RUNNERS`) and mark the folder with the outcome
    (`gsr_train.runtime.run_folder`).

    A stop signal (`gsr_train.runtime.interrupts`) marks the folder interrupted, requeues a SLURM
    job on its requeue signal and exits with ``128 + signal``; ``resume=auto`` continues the run.
    """
    check_recipe(cfg)  # unknown or misspelled options: one message before any work
    check_device(cfg)  # trainer=gpu without CUDA: one line, not Lightning's error after the data
    place_encoder(cfg)  # encoder.device: null follows the trainer
    _LOADED_DATA.clear()  # one process runs every job of a basic multirun
    runner = runner_of(cfg)  # no experiment, an unknown runner: refused before the folder is marked
    out = output_dir(cfg)
    experiment = cfg.get("experiment_name")
    if not _start_run(cfg, out, experiment):
        return None
    owns_signals = INTERRUPTS.install()
    try:
        pl.seed_everything(cfg.seed, workers=True, verbose=False)  # seed in the config; a refusal is one line
        set_matmul_precision(cfg)
        return _run_and_mark(runner, cfg, out, experiment)
    finally:
        finish_trackers()
        if owns_signals:
            INTERRUPTS.uninstall()
        release_folder(out)


def _start_run(cfg: DictConfig, out: Path, experiment: Any) -> bool:
    """Claim ``out`` (rank 0) and mark it running; False when a finished run is asked to resume."""
    if not launching_process():
        return True
    started = claim(out, cfg.get("resume"), "run")
    if started == "finished":
        print(f"{out} holds a finished run: nothing to resume.\n")
        print(run_summary(out, (run_state(out) or {}).get("experiment") or experiment, None))
        return False
    if started == "resume" and not cfg.get("resume"):  # a requeued SLURM job continues its own run
        log.info("requeued SLURM job: continuing the run in %s", out)
        with open_dict(cfg):
            cfg.resume = "auto"
    target = resume_path(cfg)
    if target is not None:
        check_readable_checkpoint(target)
    mark(out, "running", experiment)
    return True


def _run_and_mark(runner: Any, cfg: DictConfig, out: Path, experiment: Any) -> Any:
    t0 = time.perf_counter()
    try:
        result = runner(cfg)
    except RunInterrupted as stop:
        if not is_rank_zero():
            raise SystemExit(stop.exit_code) from None
        last = out / "checkpoints" / "last.ckpt"
        mark(
            out,
            "interrupted",
            experiment,
            signal=signal_name(stop.signum),
            checkpoint=str(last) if last.exists() else None,
        )
        print(
            f"\n{signal_name(stop.signum)}: {experiment} stopped"
            + (f" with {last} written" if last.exists() else "")
            + f"; continue it with: python {Path(sys.argv[0]).name} {_resume_command(cfg, out)}",
            file=sys.stderr,
        )
        requeued = requeue_slurm_job(stop.signum, slurm_job_tag())
        if requeued:
            mark(out, "interrupted", experiment, requeue=requeued)
        stopped = SystemExit(stop.exit_code)
        stopped.stopped_run = True  # type: ignore[attr-defined]  # report_user_errors leaves at once
        raise stopped from None
    except BaseException as e:
        if is_rank_zero():
            mark(out, "failed", experiment, error=f"{type(e).__name__}: {e}"[:500])
        raise
    if INTERRUPTS.signum is not None:  # its exception was dropped (raised in a finaliser): the work is done
        log.warning("%s arrived but did not stop the run, which has finished", signal_name(INTERRUPTS.signum))
    if is_rank_zero():
        mark(out, "finished", experiment)
        print("\n" + run_summary(out, experiment, time.perf_counter() - t0))
    return result


def signal_name(signum: int) -> str:

    return signal.Signals(signum).name


def _resume_command(cfg: DictConfig, out: Path) -> str:
    """The command line that continues this run: its overrides, its folder, ``resume=auto``."""
    try:
        overrides = [
            o
            for o in HydraConfig.get().overrides.task
            if not o.startswith(("resume=", "hydra.run.dir=", "hydra.sweep.dir="))
        ]
    except ValueError:  # called outside Hydra
        overrides = []
    try:
        folder = out.resolve().relative_to(Path.cwd().resolve())  # as the user would type it
    except ValueError:
        folder = out

    return " ".join(shlex.quote(o) for o in [*overrides, f"hydra.run.dir={folder}", "resume=auto"])


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix (a wrong option, a missing file or model, bad rows, a taken
    folder): one message, no traceback. Every such error derives from `UserError`."""
    return (UserError,)


def report_user_errors(fn, *args: Any) -> Any:
    """``fn(*args)``; a user error (or a failed write into the run's cache: read-only, full) becomes
    ``error: ...`` on stderr and exit status 2 (`gsr_train.data.errors.report_user_errors`)."""
    cfg = next((a for a in args if isinstance(a, DictConfig)), None)
    cache = OmegaConf.select(cfg, "paths.cache_dir", default=None) if cfg is not None else None
    try:
        run_dir = OmegaConf.select(cfg, "paths.output_dir", default=None) if cfg is not None else None
    except Exception:  # ${hydra:...} outside a Hydra run (a runner called from Python)
        run_dir = None
    try:
        return report(fn, *args, extra=user_errors(), cache_dirs=[cache], run_dirs=[run_dir])
    except SystemExit as stop:
        if stop.code == USER_ERROR_EXIT:
            discard_refused()  # a refused command leaves no run folder behind
        if getattr(stop, "stopped_run", False) and isinstance(stop.code, int):
            leave_stopped_run(stop.code)  # threads still in native code: exit now, with 128 + signal
        raise


def finish_trackers() -> None:
    """Close an open wandb run, so the next job of a multirun (same process) starts its own."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()
