"""The Trainer every runner trains with, and the scale-out rules it follows: rank 0 alone writes
(`is_rank_zero`), a batch is global or per device (`rank_batch`), checkpoints are
written atomically (`AtomicCheckpointIO`: a kill mid-write leaves the previous
``last.ckpt`` intact), ``resume: auto`` continues from ``checkpoints/last.ckpt``
(`resume_path`), and the loggers get the config and the final figures."""

from __future__ import annotations

import csv
import functools
import logging
import os
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import torch
from lightning_fabric.plugins.environments import SLURMEnvironment
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning_fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import ProgressBar

from gsr_train.config import as_dict
from gsr_train.data.errors import PreflightError
from gsr_train.runtime.checkpoints import LastCheckpoint
from gsr_train.runtime.log_progress import TrainingLogProgress
from gsr_train.runtime.run_folder import check_resume_target, process_rank

log = logging.getLogger(__name__)


def planned_world_size(cfg: DictConfig) -> int:
    """The number of training processes the trainer options ask for (devices x nodes), before any
    Trainer exists: ``devices`` an int, a list of ids, or auto / -1 (every GPU; 1 on the CPU)."""
    trainer = cfg.get("trainer") or {}
    devices, nodes = trainer.get("devices", "auto"), int(trainer.get("num_nodes", 1) or 1)
    if OmegaConf.is_list(devices) or isinstance(devices, (list, tuple)):
        count = len(devices)
    elif str(devices).strip().lstrip("-").isdigit() and int(devices) != -1:
        count = int(devices)
    else:  # auto / -1: every accelerator Lightning would take
        gpu = str(trainer.get("accelerator", "auto")) in ("auto", "gpu", "cuda") and torch.cuda.is_available()
        count = torch.cuda.device_count() if gpu else 1
    return max(count, 1) * nodes


def rank_batch(cfg: DictConfig, batch: int, key: str) -> int:
    """Each training process's batch for the recipe's ``key`` = ``batch``: the global batch split
    over the processes (``batch_scope=global``, the default, so DDP trains the recipe that one
    process trains), or all of it (``batch_scope=per_device``)."""
    scope = str(cfg.get("batch_scope", "global"))
    if scope not in ("global", "per_device"):
        raise PreflightError(f"batch_scope={scope}: use global or per_device")
    world = planned_world_size(cfg)
    if scope == "per_device" or world == 1:
        return int(batch)
    if batch % world:
        raise PreflightError(
            f"{key}={batch} is the global batch (batch_scope=global) and does not split over "
            f"{world} processes: use a multiple of {world}, or batch_scope=per_device (each "
            f"process takes {batch}, a global batch of {batch * world})"
        )
    log.info("%s=%d over %d processes: %d each (batch_scope=global)", key, batch, world, batch // world)
    return int(batch) // world


def is_rank_zero() -> bool:
    """True in the process that writes results (global rank 0; always true without DDP)."""
    rank = getattr(rank_zero_only, "rank", None)
    return int(process_rank() if rank is None else rank) == 0


def resume_path(cfg: DictConfig) -> str | None:
    """The checkpoint ``fit`` resumes from (``cfg.resume``); one way to resume: in the run's own folder.

    ``resume: auto`` -> ``<run folder>/checkpoints/last.ckpt`` when it exists (a fresh run
    otherwise); ``resume: <run folder>/checkpoints/x.ckpt`` -> that file, which must lie in this
    run's folder (``hydra.run.dir``): the run goes on where its checkpoints, logs and best
    score are, so the evaluated checkpoint is the best of the whole run; null -> none.
    """
    want = cfg.get("resume")
    if not want:
        return None
    out = Path(cfg.paths.output_dir)
    if str(want) == "auto":
        last = out / "checkpoints" / "last.ckpt"
        if last.exists():
            log.info("resuming from %s", last)
            return str(last)
        log.info("resume=auto: no %s yet, starting fresh", last)
        return None
    check_resume_target(cfg)
    return str(want)


def check_readable_checkpoint(path: str | Path) -> None:
    """A checkpoint must be whole before a run spends time on its data: torch writes a zip archive,
    whose directory (at its end) is gone when the file was cut short or overwritten."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            archive.namelist()
    except (OSError, zipfile.BadZipFile) as e:
        others = sorted(p.name for p in path.parent.glob("*.ckpt") if p != path)
        hint = f"resume={path.parent / others[-1]} continues from another of its checkpoints; " if others else ""
        raise PreflightError(
            f"{path} cannot be read ({e}): it is damaged or cut short. {hint}move it away to "
            "start the run over in its folder"
        ) from None


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning CheckpointIO that writes to a temporary name and renames: no half-written ckpt."""

    def save_checkpoint(self, checkpoint: dict, path: Any, storage_options: Any = None) -> None:

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        try:
            torch.save(checkpoint, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()


def make_trainer(cfg: DictConfig, callbacks: Sequence[Any] = (), **overrides):
    """The Lightning Trainer of ``cfg.trainer`` with the configured loggers and callbacks.

    Loggers get the resolved config as hyperparameters; checkpoints are written atomically.
    """
    loggers = [hydra.utils.instantiate(c) for c in (cfg.get("logger") or {}).values() if c]
    extra = [hydra.utils.instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c]

    if not any(isinstance(c, LastCheckpoint) for c in [*callbacks, *extra]):  # last.ckpt = newest state, always
        extra.append(
            LastCheckpoint(str(Path(cfg.paths.output_dir) / "checkpoints"), cfg.get("checkpoint_every_n_steps"))
        )
    if not sys.stderr.isatty():  # a log file: progress and ETA lines instead of a live bar
        if not any(isinstance(c, TrainingLogProgress) for c in [*callbacks, *extra]):
            extra.append(TrainingLogProgress())
        # the bar would draw nothing there, but its refresh thread costs about 5% of a CPU training run
        overrides.setdefault("enable_progress_bar", False)
    if not overrides.get("enable_progress_bar", cfg.trainer.get("enable_progress_bar", True)):
        extra = [c for c in extra if not isinstance(c, ProgressBar)]  # trainer.enable_progress_bar=false wins
    plugins = list(overrides.pop("plugins", None) or [])
    if not any(isinstance(p, TorchCheckpointIO) for p in plugins):
        plugins.append(AtomicCheckpointIO())

    if SLURMEnvironment.detect() and not any(isinstance(p, SLURMEnvironment) for p in plugins):
        # Lightning's SLURM environment (ranks, nodes), without its requeue handler: LastCheckpoint
        # stops at a resumable step and run_experiment requeues (gsr_train.runtime.interrupts)
        plugins.append(SLURMEnvironment(auto_requeue=False))
    trainer = hydra.utils.instantiate(
        # the runner's callbacks first: trainer.checkpoint_callback (whose best path DDP spawn
        # sends back to the main process) is then the runner's monitored checkpoint
        cfg.trainer,
        logger=loggers or False,
        callbacks=[*callbacks, *extra],
        plugins=plugins,
        **overrides,
    )
    for lg in loggers:
        log_hyperparams(lg, cfg)
    return trainer


@dataclass(frozen=True)
class Fitting:
    """How a training stage fits its model, bound to the run's config once by the runner
    (`run_fitting`): the Trainer of ``trainer=`` / ``logger=`` / ``callbacks=``, each process's share
    of a recipe's batch, the seed, the checkpoint ``resume`` names and the run folder. A stage below
    the runners takes this, never the config."""

    out: Path
    seed: int
    resume: str | None  # resume_path: the checkpoint fit continues from
    trainer: Callable[..., Any]  # make_trainer(cfg, callbacks=..., **overrides)
    batch: Callable[[int, str], int]  # rank_batch(cfg, batch, key): this process's share


def run_fitting(cfg: DictConfig) -> Fitting:
    """The `Fitting` of the run configured by ``cfg``."""
    return Fitting(
        Path(cfg.paths.output_dir),
        int(cfg.seed),
        resume_path(cfg),
        functools.partial(make_trainer, cfg),
        functools.partial(rank_batch, cfg),
    )


def fit_state(trainer: Any, checkpoint_cb: Any = None) -> dict:
    """``global_step``, ``epochs_run``, ``best_path``, ``best_score`` of a finished ``fit``.

    After ``ddp_spawn`` the main process's trainer only gets the weights and the best path
    back (its step counters stay 0): the figures are then read from the checkpoints.
    """
    state: dict[str, Any] = {
        "global_step": int(trainer.global_step),
        "epochs_run": int(trainer.current_epoch),
        "best_path": getattr(checkpoint_cb, "best_model_path", "") or None,
        "best_score": None,
    }
    score = getattr(checkpoint_cb, "best_model_score", None)
    if score is not None:
        state["best_score"] = float(score)
    last = Path(getattr(checkpoint_cb, "dirpath", "") or ".") / "last.ckpt"
    if state["global_step"] == 0 and last.exists():
        ckpt = torch.load(last, map_location="cpu", weights_only=False)
        state["global_step"] = int(ckpt.get("global_step", 0))
        state["epochs_run"] = int(ckpt.get("epoch", 0))
    if state["best_score"] is None and state["best_path"] and Path(state["best_path"]).exists():
        ckpt = torch.load(state["best_path"], map_location="cpu", weights_only=False)
        for key, cb in (ckpt.get("callbacks") or {}).items():
            if key.startswith("ModelCheckpoint") and cb.get("best_model_path") == state["best_path"]:
                value = cb.get("best_model_score")
                state["best_score"] = None if value is None else float(value)
    return state


def flat_config(cfg: DictConfig) -> dict:
    """The resolved config as a flat ``{"a/b/c": value}`` dict (what loggers show as hparams)."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}/{k}" if prefix else str(k))
        elif isinstance(node, list) and not all(isinstance(x, (int, float, str, bool)) or x is None for x in node):
            out[prefix] = str(node)
        else:
            out[prefix] = node

    try:
        data = as_dict(cfg)
    except Exception:  # e.g. ${hydra:...} outside a Hydra run
        data = as_dict(cfg, resolve=False)
    data.pop("hydra", None)
    walk(data, "")
    return out


def log_hyperparams(logger: Any, cfg: DictConfig) -> None:
    """Hyperparameters of the run (the composed config) to one Lightning logger."""
    try:
        logger.log_hyperparams(flat_config(cfg))
    except Exception as e:  # a logger that cannot take some value must not stop training
        log.warning("could not log hyperparameters to %s: %s", type(logger).__name__, e)


def _adopt_csv_header(logger: Any) -> None:
    """A CSVLogger that did not write the file itself (main process after ddp_spawn) learns its columns."""
    writer = getattr(logger, "experiment", None) if type(logger).__name__ == "CSVLogger" else None
    path = getattr(writer, "metrics_file_path", None)
    if writer is None or writer.metrics_keys or not path or not Path(path).is_file():
        return
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    writer.metrics_keys.extend(k for k in header if k not in writer.metrics_keys)


def log_final_metrics(trainer: Any, metrics: dict[str, Any], prefix: str = "final") -> None:
    """Flat numeric ``metrics`` to every logger of ``trainer`` (rank 0), then flush them."""
    if trainer is None or not is_rank_zero():
        return
    flat = {
        f"{prefix}/{k}": float(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
    }
    for lg in trainer.loggers:
        try:
            _adopt_csv_header(lg)
            lg.log_metrics(flat, step=int(trainer.global_step))
            if hasattr(lg, "experiment") and type(lg).__name__ == "WandbLogger":
                lg.experiment.summary.update(flat)
            lg.save()
        except Exception as e:
            log.warning("could not log final metrics to %s: %s", type(lg).__name__, e)
