"""Pieces every runner shares: data resolution, the KG index, the Trainer, result files.

Scale-out rules every runner follows: result files and exports are written by global rank 0
only (:func:`is_rank_zero`); checkpoints are written atomically (:class:`AtomicCheckpointIO`,
a kill mid-write leaves the previous ``last.ckpt`` intact); ``resume: auto`` continues from
the run folder's ``checkpoints/last.ckpt`` (:func:`resume_path`).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Sequence

import hydra
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from omegaconf import DictConfig, OmegaConf

from gsr_train.io import write_json

log = logging.getLogger(__name__)


def run_experiment(cfg: DictConfig) -> Any:
    """Seed, then call the experiment's runner (``cfg.runner`` is a dotted function path)."""
    import pytorch_lightning as pl

    pl.seed_everything(cfg.seed, workers=True)
    runner = hydra.utils.get_method(cfg.runner)
    try:
        return runner(cfg)
    finally:
        finish_trackers()


def finish_trackers() -> None:
    """Close an open wandb run, so the next job of a multirun (same process) starts its own."""
    import sys

    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()


def cache_dir(cfg: DictConfig) -> Path:
    return Path(cfg.paths.cache_dir)


def output_dir(cfg: DictConfig) -> Path:
    path = Path(cfg.paths.output_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve_data_dir(cfg: DictConfig) -> str:
    """The folder (or hub name) of the dataset; the embedded benchmark is generated on demand."""
    if cfg.data.get("dir"):
        return str(cfg.data.dir)
    if cfg.data.name == "synthetic":
        from gsr_train.data.synthetic import ensure_synthetic

        options = OmegaConf.to_container(cfg.data.get("synthetic") or {}, resolve=True)
        return str(ensure_synthetic(options, cache_dir(cfg)))
    raise ValueError(f"data config {cfg.data.name!r} has no `dir`; set data.dir=/path/to/rog/splits")


def load_kg_index(cfg: DictConfig):
    from gsr_train.kg.index import get_index

    return get_index(
        resolve_data_dir(cfg),
        splits=tuple(cfg.data.splits),
        cache_dir=cache_dir(cfg),
        skip_invalid=bool(cfg.data.get("skip_invalid", False)),
    )


def label_path(cfg: DictConfig, split: str) -> str | None:
    labels = cfg.data.get("labels") or {}
    path = labels.get(split)
    return str(path) if path else None


class PreflightError(ValueError):
    """Inputs a run needs are missing or wrong: found before any long work starts."""


def preflight(cfg: DictConfig, splits: Sequence[str] = (), label_splits: Sequence[str] = (),
              checkpoints: dict[str, Any] | None = None, encoder: Any = None) -> None:
    """Check every input the run will need, before the index, embeddings or training.

    ``splits``: splits the run reads (each must be in ``data.splits`` and, for a local
    folder, have its file(s)); ``label_splits``: splits whose ``data.labels`` file must exist
    when one is configured; ``checkpoints``: ``{option name: path}`` that must be files
    (``auto`` and empty values are skipped); ``encoder``: an encoder config that must load.
    All problems are reported at once, each naming the option to fix.
    """
    from gsr_train.data.rows import split_files

    problems: list[str] = []
    configured = list(cfg.data.get("splits") or [])
    for split in dict.fromkeys(s for s in splits if s):
        if configured and split not in configured:
            problems.append(f"split {split!r} is not in data.splits {configured}")
    data_dir = cfg.data.get("dir")
    if data_dir and Path(str(data_dir)).is_dir():
        for split in dict.fromkeys(s for s in [*configured, *splits] if s):
            try:
                split_files(Path(str(data_dir)), split)
            except (FileNotFoundError, FileExistsError) as e:
                problems.append(f"data.dir: {e}")
    elif data_dir and (str(data_dir).startswith(("/", ".", "~")) or Path(str(data_dir)).suffix):
        problems.append(f"data.dir={data_dir} does not exist")
    for split in label_splits:
        path = label_path(cfg, split)
        if path and not Path(path).is_file():
            problems.append(f"data.labels.{split}={path} does not exist")
    for option, path in (checkpoints or {}).items():
        if path and str(path) != "auto" and not Path(str(path)).exists():
            problems.append(f"{option}={path} does not exist")
    if encoder is not None:
        from gsr_train.text.encoders import load_encoder

        try:
            load_encoder(OmegaConf.to_container(encoder, resolve=True) if isinstance(encoder, DictConfig)
                         else encoder)
        except Exception as e:  # unknown name or option, model folder missing, hub offline
            problems.append(f"encoder: {e}")
    if problems:
        raise PreflightError("cannot start the run:\n  - " + "\n  - ".join(problems))


def is_rank_zero() -> bool:
    """True in the process that writes results (global rank 0; always true without DDP)."""
    from lightning_fabric.utilities.rank_zero import rank_zero_only

    rank = getattr(rank_zero_only, "rank", None)
    if rank is None:
        rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)) or 0)
    return int(rank) == 0


def resume_path(cfg: DictConfig, explicit: str | None = None) -> str | None:
    """The checkpoint ``fit`` resumes from: ``explicit`` if given, else ``cfg.resume``.

    ``resume: auto`` -> ``<run folder>/checkpoints/last.ckpt`` when it exists (a fresh run
    otherwise); ``resume: /path/x.ckpt`` -> that file (an error when missing); null -> none.
    """
    want = explicit or cfg.get("resume")
    if not want:
        return None
    if str(want) == "auto":
        last = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
        if last.exists():
            log.info("resuming from %s", last)
            return str(last)
        log.info("resume=auto: no %s yet, starting fresh", last)
        return None
    if not Path(str(want)).exists():
        raise FileNotFoundError(f"resume checkpoint {want} does not exist")
    return str(want)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning CheckpointIO that writes to a temporary name and renames: no half-written ckpt."""

    def save_checkpoint(self, checkpoint: dict, path: Any, storage_options: Any = None) -> None:
        import torch

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
    if not overrides.get("enable_progress_bar", cfg.trainer.get("enable_progress_bar", True)):
        from pytorch_lightning.callbacks import ProgressBar

        extra = [c for c in extra if not isinstance(c, ProgressBar)]  # trainer.enable_progress_bar=false wins
    plugins = list(overrides.pop("plugins", None) or [])
    if not any(isinstance(p, TorchCheckpointIO) for p in plugins):
        plugins.append(AtomicCheckpointIO())
    trainer = hydra.utils.instantiate(
        # the runner's callbacks first: trainer.checkpoint_callback (whose best path DDP spawn
        # sends back to the main process) is then the runner's monitored checkpoint
        cfg.trainer, logger=loggers or False, callbacks=[*callbacks, *extra], plugins=plugins, **overrides
    )
    for lg in loggers:
        log_hyperparams(lg, cfg)
    return trainer


def fit_state(trainer: Any, checkpoint_cb: Any = None) -> dict:
    """``global_step``, ``epochs_run``, ``best_path``, ``best_score`` of a finished ``fit``.

    After ``ddp_spawn`` the main process's trainer only gets the weights and the best path
    back (its step counters stay 0): the figures are then read from the checkpoints.
    """
    import torch

    state = {"global_step": int(trainer.global_step), "epochs_run": int(trainer.current_epoch),
             "best_path": getattr(checkpoint_cb, "best_model_path", "") or None,
             "best_score": None}
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
        data = OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # e.g. ${hydra:...} outside a Hydra run
        data = OmegaConf.to_container(cfg, resolve=False)
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
    import csv

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
    flat = {f"{prefix}/{k}": float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v}
    for lg in trainer.loggers:
        try:
            _adopt_csv_header(lg)
            lg.log_metrics(flat, step=int(trainer.global_step))
            if hasattr(lg, "experiment") and type(lg).__name__ == "WandbLogger":
                lg.experiment.summary.update(flat)
            lg.save()
        except Exception as e:
            log.warning("could not log final metrics to %s: %s", type(lg).__name__, e)


def save_figures(cfg: DictConfig, name: str, figures: Any) -> Path:
    """Write figures as JSON into the run folder (atomically, rank 0 only) and return the path."""
    path = output_dir(cfg) / name
    if not is_rank_zero():
        return path
    write_json(path, figures)
    log.info("wrote %s", path)
    return path
