"""Pieces every runner shares: data resolution, the KG index, the Trainer, result files."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

import hydra
from omegaconf import DictConfig, OmegaConf

from gsr_train.io import write_json

log = logging.getLogger(__name__)


def run_experiment(cfg: DictConfig) -> Any:
    """Seed, then call the experiment's runner (``cfg.runner`` is a dotted function path)."""
    import pytorch_lightning as pl

    pl.seed_everything(cfg.seed, workers=True)
    runner = hydra.utils.get_method(cfg.runner)
    return runner(cfg)


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


def make_trainer(cfg: DictConfig, callbacks: Sequence[Any] = (), **overrides):
    """The Lightning Trainer of ``cfg.trainer`` with the configured loggers and callbacks."""
    loggers = [hydra.utils.instantiate(c) for c in (cfg.get("logger") or {}).values() if c]
    extra = [hydra.utils.instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c]
    return hydra.utils.instantiate(
        cfg.trainer, logger=loggers or False, callbacks=[*extra, *callbacks], **overrides
    )


def save_figures(cfg: DictConfig, name: str, figures: Any) -> Path:
    """Write figures as JSON into the run folder (atomically) and return the path."""
    path = output_dir(cfg) / name
    write_json(path, figures)
    log.info("wrote %s", path)
    return path
