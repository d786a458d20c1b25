"""``+experiment=retrieve`` with a trainable retriever: train it, then score it like any other.

A retriever whose name or ``_target_`` is an
`gsr_train.models.edge_scorer.EdgeScorerModule` subclass (a plugin outside gsr-train
included) is made from ``retriever.options`` (plus ``dim``, the text embedding size, when its
constructor takes it), trained on the shared pipeline by `gsr_train.retrievers.edge_training.fit_edge_scorer`
(the run's trainer, callbacks, DDP, ``resume=auto``, run folder) with ``retriever.train``, and its
best checkpoint scores the split through `gsr_train.runs.retrieval_report.report_retrieval`.
``eval_only=<checkpoint>`` (what eval.py sets) skips training.
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import Any

from omegaconf import DictConfig

from gsr_train.config import as_dict
from gsr_train.data.errors import PreflightError
from gsr_train.models.edge_scorer import CheckpointError, load_edge_scorer
from gsr_train.options.preflight import check_retriever
from gsr_train.retrievers.edge_scorer import check_trained_on, serve
from gsr_train.retrievers.edge_training import EdgeRecipe, EdgeSplits, edge_data, fit_edge_scorer, model_meta
from gsr_train.retrievers.registry import RetrieverError
from gsr_train.runs.retrieval_report import report_retrieval
from gsr_train.runtime.device import run_device
from gsr_train.runtime.run_data import load_kg_index, run_place, set_run_workers
from gsr_train.runtime.training import run_fitting

log = logging.getLogger(__name__)


def make_module(cls: type, options: dict[str, Any], dim: int) -> Any:
    """``cls.create(**options)`` (with ``dim`` when the constructor takes it); refused options are one line."""
    params = inspect.signature(cls).parameters
    kwargs = {"dim": dim, **options} if "dim" in params and "dim" not in options else dict(options)
    try:
        return cls.create(**kwargs)  # type: ignore[attr-defined]
    except (TypeError, ValueError) as e:
        raise RetrieverError(f"retriever {cls.__module__}.{cls.__qualname__}: {e}") from None


def run_trainable(cfg: DictConfig, cls: type) -> dict[str, Any]:
    """Train ``cls`` (unless ``eval_only``), score ``cfg.split`` with its best checkpoint, report."""
    split, train = str(cfg.split), cfg.retriever.train
    eval_only = cfg.get("eval_only")
    check_retriever(cfg, trained=True)
    index = load_kg_index(cfg, evaluate=[split])
    train_split = None if eval_only else str(cfg.train_split)
    val_split = str(cfg.val_split) if cfg.get("val_split") else None
    emb, sup = run_edge_data(cfg, index, EdgeSplits(train_split, val_split, split, "val_split"))
    info: dict[str, Any] = {}
    best = str(eval_only) if eval_only else None
    if best is None:
        best, info = _train(cfg, cls, index, emb, sup)
        if best is None:  # DDP: rank 0 alone evaluates and writes
            return {}
    return _score(cfg, index, emb, split, best, int(train.eval_graphs_per_batch), info)


def run_edge_data(cfg: DictConfig, index: Any, splits: EdgeSplits) -> tuple[Any, dict]:
    """`edge_data` of a triple-scorer run (SubgraphRAG's, a trainable retriever's): its place,
    ``data.workers`` (set for the process) and dataset."""
    return edge_data(run_place(cfg), set_run_workers(cfg), str(cfg.data.name), index, splits)


def _train(cfg: DictConfig, cls: type, index: Any, emb: Any, sup: dict) -> tuple[str | None, dict]:

    train, data = cfg.retriever.train, str(cfg.data.name)
    module = make_module(cls, as_dict(cfg.retriever.options) if cfg.retriever.get("options") else {}, emb.dim)
    module.train_with(int(train.val_k), int(cfg.seed), as_dict(train.loss), model_meta(index, emb, data))
    recipe = EdgeRecipe(
        train_split=str(cfg.train_split),
        val_split=str(cfg.val_split) if cfg.get("val_split") else None,
        graphs_per_batch=int(train.graphs_per_batch),
        batch_option="retriever.train.graphs_per_batch",
        eval_graphs_per_batch=int(train.eval_graphs_per_batch),
        epochs=int(train.epochs),
        patience=train.get("patience"),
        val_k=int(train.val_k),
    )
    trained = fit_edge_scorer(run_fitting(cfg), module, index, emb, sup, recipe)
    return trained.best_path, {**trained.info, "train_s": round(trained.seconds, 3)}


def _score(cfg: DictConfig, index: Any, emb: Any, split: str, best: str, per_batch: int, info: dict) -> dict[str, Any]:

    try:
        module = load_edge_scorer(best, map_location=run_device(cfg))
        check_trained_on(module.meta, emb, best)
    except (CheckpointError, ValueError) as e:
        raise PreflightError(f"eval_only={best}: {e}" if cfg.get("eval_only") else str(e)) from None
    t0 = time.perf_counter()
    scores, extra = serve(module, index, index[split], emb.question[split], emb, per_batch)
    extra["score_seconds"] = round(time.perf_counter() - t0, 3)
    return report_retrieval(
        cfg, index, split, type(module).__name__, scores, extra, {"training": info, "checkpoint": best}
    )
