"""``+experiment=retrieve retriever=gsr``: the GSR run behind it, as options. Its ``gsr`` section is
``retriever.options`` over `gsr_train.options.recipes.GSRRun`'s defaults; what the retrieve
experiment names its own way (``split``, ``eval_only``, one decoding mode) is refused under GSR's
names, in one line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from gsr_train.config import as_dict, defaults_of, project_root
from gsr_train.data.errors import PreflightError
from gsr_train.options.recipes import RECIPES, GSRRun


def on_retrieve_path(cfg: DictConfig) -> bool:
    """``retriever=gsr`` on ``+experiment=retrieve`` that trains GSR or scores a trained one here
    (a results file, ``retriever.options.results``, is read by the registered retriever)."""
    spec = cfg.get("retriever") or {}
    options = spec.get("options") or {}
    return spec.get("name") == "gsr" and not spec.get("_target_") and not options.get("results")


def trains_first(cfg: DictConfig) -> bool:
    """``retriever=gsr`` naming nothing trained: the run trains it (eval.py refuses that)."""
    options = cfg.retriever.get("options") or {}
    return on_retrieve_path(cfg) and not options.get("model") and not cfg.get("eval_only")


def retriever_run_config(cfg: DictConfig) -> DictConfig:
    """The GSR run behind ``retriever=gsr``: its ``gsr`` section is ``retriever.options`` over
    `gsr_train.options.recipes.GSRRun`'s defaults, with the experiment's ``split``,
    ``eval_only`` and ``decode.constrained`` for ``gsr.eval_split``, ``gsr.eval_only`` and
    ``gsr.eval_modes``; its epochs are ``model.epochs``."""
    options = as_dict(cfg.retriever.options) if cfg.retriever.get("options") else {}
    check_gsr_retrieve(cfg, options)
    model = cfg.get("eval_only") or options.get("model")
    options = {k: v for k, v in options.items() if k not in ("model", "results")}
    g = OmegaConf.merge(OmegaConf.create(defaults_of(GSRRun)), options)
    g.eval_split, g.eval_only = str(cfg.split), None if model is None else str(model)
    g.eval_modes = ["constrained" if g.decode.constrained else "unconstrained"]
    out = cfg.copy()
    with open_dict(out):
        out.gsr = g
        out.trainer.max_epochs = OmegaConf.select(out, "model.epochs", default=out.trainer.max_epochs)
    return out


RETRIEVE_FILE = RECIPES["retrieve"].file  # conf/experiment/retrieve.yaml
# GSR options whose concept the retrieve experiment names itself, and where it does
RETRIEVE_NAMES = {
    "eval_split": "split=...",
    "eval_only": "eval_only=... (or retriever.options.model=...)",
    "eval_modes": "retriever.options.decode.constrained=true|false (one decoding mode per run)",
    "max_eval_questions": "nothing: it scores every question of the split (pick a smaller split instead)",
}


def check_gsr_retrieve(cfg: DictConfig, options: Mapping[str, Any]) -> None:
    """``+experiment=retrieve retriever=gsr``: what the retrieve experiment says its own way, or GSR
    does not read, is one line."""
    for key, ours in RETRIEVE_NAMES.items():
        if key in options:
            raise PreflightError(f"retriever.options.{key}: on +experiment=retrieve that is {ours}")
    edge = as_dict(OmegaConf.load(project_root() / RETRIEVE_FILE).retriever.train)  # what a user left alone
    for key, value in as_dict(cfg.retriever.train).items():
        if value != edge.get(key, value):
            raise PreflightError(
                f"retriever.train.{key}={value}: retriever.train is the triple scorers' recipe; GSR trains by "
                "model.epochs, model.batch_size, model.optim and retriever.options (conf/retriever/gsr.yaml)"
            )
    if str(cfg.get("train_split")) != "train" or cfg.get("val_split") != "validation":
        raise PreflightError(
            f"train_split={cfg.get('train_split')} val_split={cfg.get('val_split')}: retriever=gsr trains on the "
            "train split and picks its checkpoint on validation (set both back)"
        )
    if cfg.data.get("format") == "paths":
        raise PreflightError(
            f"data={cfg.data.name} is chain files (data.format=paths): +experiment=retrieve scores RoG-format "
            "data (graphs in the rows); train on chain files with +experiment=gsr_webqsp_paths"
        )
