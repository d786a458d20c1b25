"""Training any triple scorer on the shared pipeline: SubgraphRAG and every trainable plugin.

One path for the datamodule (whole question graphs with the node features the module asks
for and shortest-path labels), the monitored best checkpoint, early stopping, the run's
Trainer (loggers, ``last.ckpt``, DDP, resume) and the figures of what training did.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytorch_lightning.callbacks import Callback, EarlyStopping, ModelCheckpoint

from gsr_train.datamodules.triple_datamodule import TripleDataModule
from gsr_train.kg.paths import get_supervision
from gsr_train.runtime.run_data import RunPlace, require_split
from gsr_train.runtime.training import Fitting, fit_state, is_rank_zero
from gsr_train.text.embeddings import get_embeddings

log = logging.getLogger(__name__)


@dataclass
class EdgeRecipe:
    """How a triple scorer trains: the splits, the batch (and the option that sets it), epochs,
    early stopping and the K of the monitored validation recall."""

    train_split: str
    val_split: str | None
    graphs_per_batch: int
    batch_option: str  # the option a user sets it with (named in DDP batch messages)
    eval_graphs_per_batch: int
    epochs: int
    patience: int | None
    val_k: int


@dataclass
class Trained:
    """What `fit_edge_scorer` returns: the checkpoint to evaluate (None on DDP ranks > 0),
    the training figures for metrics.json, the trainer and the datamodule."""

    best_path: str | None
    info: dict[str, Any]
    trainer: Any
    datamodule: Any
    seconds: float


@dataclass(frozen=True)
class EdgeSplits:
    """The splits a triple-scorer run reads (no ``train``: evaluation only) and the option that names
    the validation split (named in its error)."""

    train: str | None
    val: str | None
    eval: str
    val_option: str


def edge_data(place: RunPlace, workers: int, data: str, index: Any, splits: EdgeSplits) -> tuple[Any, dict]:
    """Embeddings and shortest-path supervision of the ``splits`` of dataset ``data`` (with ``workers``
    threads, `gsr_train.runtime.run_data.set_run_workers`), the training and validation splits
    checked to teach something."""
    train_split, val_split, val_option = splits.train, splits.val, splits.val_option
    read = list(dict.fromkeys(s for s in ((train_split, val_split) if train_split else ()) + (splits.eval,) if s))
    emb = get_embeddings(index, place.encoder, place.cache_dir, splits=read, workers=workers)
    sup = {s: get_supervision(index, s, place.cache_dir, workers=workers) for s in read}
    if train_split:
        require_split(index, train_split, "training", data, sup[train_split].triple_label)
        if val_split:
            require_split(
                index,
                val_split,
                "validation",
                data,
                sup[val_split].triple_label,
                hint="early stopping and the best checkpoint need it; fix the split, or set "
                f"{val_option}=null to train without validation",
            )
    return emb, sup


def model_meta(index: Any, emb: Any, data_name: str) -> dict:
    """What a checkpoint needs to be matched with its inputs again."""
    return {
        "encoder_name": emb.encoder_name,
        "dim": emb.dim,
        "relation_text": emb.meta.get("relation_text"),
        "entity_vocab_hash": index.entities.fingerprint(),
        "relation_vocab_hash": index.relations.fingerprint(),
        "num_entities": len(index.entities),
        "num_relations": len(index.relations),
        "index_key": index.key,
        "data": data_name,
    }


def monitor_of(recipe: EdgeRecipe, targets: str = "triples") -> str | None:
    """The validation figure that picks the best checkpoint (none without a validation split): the
    recall of the shortest-path triples at ``val_k``, or a node scorer's Hit@1 (its first answer)."""
    if not recipe.val_split:
        return None
    return "val/hit@1" if targets == "nodes" else f"val/sp_recall@{recipe.val_k}"


def fit_edge_scorer(fit: Fitting, module: Any, index: Any, emb: Any, sup: dict, recipe: EdgeRecipe) -> Trained:
    """Fit ``module`` (an `gsr_train.models.edge_scorer.EdgeScorerModule`) with the run's trainer."""
    forward, reverse = module.dde_rounds
    dm = TripleDataModule(
        index,
        emb,
        sup,
        str(module.structure),
        int(forward),
        int(reverse),
        train_split=recipe.train_split,
        val_split=recipe.val_split,
        graphs_per_batch=fit.batch(recipe.graphs_per_batch, recipe.batch_option),
        eval_graphs_per_batch=recipe.eval_graphs_per_batch,
        seed=fit.seed,
        targets=str(module.targets),
    )
    module.validate_on(dm)
    monitor = monitor_of(recipe, str(module.targets))
    ckpt, callbacks = _callbacks(fit.out, recipe, monitor)
    trainer = fit.trainer(callbacks=callbacks, max_epochs=recipe.epochs)
    t0 = time.perf_counter()
    trainer.fit(module, dm, ckpt_path=fit.resume)
    seconds = time.perf_counter() - t0
    if not is_rank_zero():
        return Trained(None, {}, trainer, dm, seconds)
    return Trained(*_figures(fit.out, index, recipe, trainer, ckpt, dm, monitor), trainer, dm, seconds)


def _callbacks(out: Path, recipe: EdgeRecipe, monitor: str | None) -> tuple[Any, list]:
    """The monitored best checkpoint (first: DDP spawn sends its path back) and early stopping."""

    # without a validation split: no early stopping, and the final epoch is the checkpoint evaluated
    ckpt = ModelCheckpoint(
        dirpath=out / "checkpoints",
        filename="best-{epoch:02d}",
        monitor=monitor,
        mode="max",
        save_last=False,
        auto_insert_metric_name=False,
        enable_version_counter=False,
    )
    callbacks: list[Callback] = [ckpt]
    if recipe.patience and monitor:
        callbacks.append(EarlyStopping(monitor=monitor, mode="max", patience=int(recipe.patience)))
    return ckpt, callbacks


def _figures(
    out: Path, index: Any, recipe: EdgeRecipe, trainer: Any, ckpt: Any, dm: Any, monitor: str | None
) -> tuple[str, dict]:
    """The checkpoint to evaluate and the training figures (rank 0, after ``fit``)."""
    state = fit_state(trainer, ckpt)
    best_path = state["best_path"] or str(out / "checkpoints" / "last.ckpt")
    dm.setup("fit")
    assert dm.train_questions is not None  # set by setup
    info = {
        "epochs_run": state["epochs_run"],
        "graphs": int(dm.train_questions.numel()),
        "skipped": dm.skipped,
        "triples_per_epoch": int(index[recipe.train_split].num_edges[dm.train_questions].sum()),
        "best_score": state["best_score"],
        "best_checkpoint": best_path,
        "last_checkpoint": str(out / "checkpoints" / "last.ckpt"),
        "monitor": monitor,
        "global_step": state["global_step"],
        "devices": int(trainer.world_size),
    }
    log.info("training done; best %s = %s (%s)", info["monitor"], state["best_score"], best_path)
    return best_path, info
