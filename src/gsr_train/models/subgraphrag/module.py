"""LightningModule that trains the SubgraphRAG triple scorer.

Loss: BCE-with-logits over every triple of the batch's graphs (optional ``pos_weight``),
plus an optional listwise term (softmax cross-entropy of each graph's positives against
all of its triples), which targets the top of the ranking that small-K recall measures.
Validation ranks all triples of the validation split and logs triple recall@``val_k``
(``val/sp_recall@K``, the early-stopping / checkpoint monitor) and answer recall@K with
the project's batched metrics.

Checkpoints carry everything needed to rebuild the scorer without the training config
(``save_hyperparameters``: architecture options, embedding ``dim``, encoder name and
vocabulary hashes in ``meta``). Each training step reseeds the global RNG from
``(seed, global_step)``, so dropout masks do not depend on what ran before: a run resumed
from ``last.ckpt`` ends with the same weights as an uninterrupted one.

Distributed (DDP): every rank scores its share of the validation graphs into its own
``[num_edges]`` score vector (``-inf`` elsewhere); an element-wise max all-reduce merges them
before the metrics, so validation recall is computed over *all* validation questions (the
padding duplicates of the distributed sampler score the same edges identically).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any, Protocol

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch_geometric.utils import scatter

from gsr_train.features.triple_batch import TripleBatch
from gsr_train.kg.index import SplitGraphs
from gsr_train.models.subgraphrag.scorer import ScorerConfig, TripleScorer

log = logging.getLogger(__name__)

DEFAULT_OPTIM = {"lr": 1e-3, "weight_decay": 0.0, "scheduler": "none", "warmup_epochs": 0, "fused": True}
DEFAULT_LOSS = {"pos_weight": None, "listwise": 0.0}


def listwise_loss(
    logits: torch.Tensor, labels: torch.Tensor, question: torch.Tensor, num_questions: int
) -> torch.Tensor:
    """Mean over graphs with a positive of ``-mean_{i in pos} log softmax_graph(logits)_i``."""
    top = scatter(logits.detach(), question, dim=0, dim_size=num_questions, reduce="max")
    shifted = logits - top[question]
    lse = torch.log(scatter(shifted.exp(), question, dim=0, dim_size=num_questions, reduce="sum").clamp_min(1e-30))
    log_p = shifted - lse[question]
    pos = labels > 0
    n_pos = scatter(pos.float(), question, dim=0, dim_size=num_questions, reduce="sum")
    per_q = scatter(
        torch.where(pos, -log_p, torch.zeros_like(log_p)), question, dim=0, dim_size=num_questions, reduce="sum"
    )
    has = n_pos > 0
    if not bool(has.any()):
        return logits.sum() * 0.0
    return (per_q[has] / n_pos[has]).mean()


class ValidationSource(Protocol):
    """Where validation recall comes from: the split's graphs and its triple labels."""

    def validation_graphs(self) -> tuple[SplitGraphs, torch.Tensor]: ...


class SubgraphRAGModule(pl.LightningModule):
    """``model``: scorer options (see :class:`ScorerConfig.from_options`); ``dim``: text embedding size."""

    def __init__(
        self,
        model: Mapping[str, Any],
        dim: int,
        optim: Mapping[str, Any] | None = None,
        loss: Mapping[str, Any] | None = None,
        val_k: int = 100,
        seed: int = 0,
        meta: Mapping[str, Any] | None = None,
        train_forward: str = "fast",
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.scorer = TripleScorer(ScorerConfig.from_options(dict(model), dim))
        self.optim_cfg = {**DEFAULT_OPTIM, **dict(optim or {})}
        self.loss_cfg = {**DEFAULT_LOSS, **dict(loss or {})}
        self.val_k = int(val_k)
        self.seed = int(seed)
        self._val_scores: torch.Tensor | None = None
        if train_forward not in ("fast", "reference"):
            raise ValueError(f"train_forward must be 'fast' or 'reference', got {train_forward!r}")
        self.train_forward = train_forward  # "reference": concatenate-then-Linear (benchmarks only)

    @property
    def config(self) -> ScorerConfig:
        return self.scorer.config

    def forward(self, batch: TripleBatch) -> torch.Tensor:
        return self.scorer(batch)

    # ---------------------------------------------------------------- training
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        torch.manual_seed((self.seed * 1_000_003 + self.global_step) % (1 << 63))

    def compute_loss(self, logits: torch.Tensor, batch: TripleBatch) -> torch.Tensor:
        labels = batch.labels
        if labels is None:
            raise ValueError("the loss needs batches with labels")
        pw = self.loss_cfg.get("pos_weight")
        pos_weight = None if pw in (None, 0, 1) else torch.tensor(float(pw), device=logits.device)
        loss = F.binary_cross_entropy_with_logits(logits, labels, pos_weight=pos_weight)
        weight = float(self.loss_cfg.get("listwise") or 0.0)
        if weight:
            loss = loss + weight * listwise_loss(logits, labels, batch.triple_question(), batch.num_questions)
        return loss

    def training_step(self, batch: TripleBatch, batch_idx: int) -> torch.Tensor:
        if batch.labels is None:
            raise ValueError("training batches need labels")
        logits = self.scorer(batch) if self.train_forward == "fast" else self.scorer.forward_reference(batch)
        loss = self.compute_loss(logits, batch)
        self.log("train/loss", loss, batch_size=batch.num_questions, prog_bar=True)
        return loss

    # ---------------------------------------------------------------- validation
    def validate_on(self, source: ValidationSource | None) -> SubgraphRAGModule:
        """The graphs and labels validation recall is computed on, handed over by the recipe
        (the module does not know the datamodule: any object with ``validation_graphs()``)."""
        self._validation_source = source
        return self

    def _val_data(self):
        source = getattr(self, "_validation_source", None)
        if source is None:
            raise RuntimeError("validation needs its graphs: call module.validate_on(<datamodule>) in the recipe")
        return source.validation_graphs()

    def on_validation_epoch_start(self) -> None:
        split, _ = self._val_data()
        self._val_scores = torch.full((int(split.edge_ptr[-1]),), -math.inf)

    def _epoch_val_scores(self) -> torch.Tensor:
        """The validation epoch's score table (set by :meth:`on_validation_epoch_start`)."""
        if self._val_scores is None:
            raise RuntimeError("no validation epoch is running")
        return self._val_scores

    def validation_step(self, batch: TripleBatch, batch_idx: int) -> None:
        self._epoch_val_scores()[batch.edge_ids.cpu()] = self.scorer(batch).float().cpu()

    def _merge_val_scores(self) -> None:
        """Max all-reduce of the per-rank validation scores (no-op in a single process)."""
        import torch.distributed as dist

        if self.trainer.world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
            return
        scores = self._epoch_val_scores().to(self.device)
        dist.all_reduce(scores, op=dist.ReduceOp.MAX)
        self._val_scores = scores.cpu()

    def on_validation_epoch_end(self) -> None:
        from gsr_train.eval.retrieval import retrieval_metrics

        self._merge_val_scores()
        split, labels = self._val_data()
        report = retrieval_metrics(split, self._epoch_val_scores(), [self.val_k], sp_label=labels)
        for metric in ("sp_recall", "answer_recall"):
            value = report.overall[metric][self.val_k]
            if value is not None:
                # identical on every rank after the merge; sync_dist keeps Lightning's reduction explicit
                self.log(f"val/{metric}@{self.val_k}", float(value), prog_bar=metric == "sp_recall", sync_dist=True)
        self._val_scores = None

    # ---------------------------------------------------------------- optimiser
    def configure_optimizers(self):
        cfg = self.optim_cfg
        # fused Adam: one kernel over all parameters instead of a dozen passes per tensor (the
        # first layer has ~2M weights, and the paper takes one optimiser step per graph)
        kwargs = {"lr": float(cfg["lr"]), "weight_decay": float(cfg["weight_decay"] or 0.0)}
        opt = None
        if cfg.get("fused", True):
            try:
                opt = torch.optim.Adam(self.parameters(), fused=True, **kwargs)
            except (RuntimeError, TypeError):
                opt = None
        opt = opt or torch.optim.Adam(self.parameters(), **kwargs)
        name = cfg.get("scheduler") or "none"
        if name == "none":
            return opt
        if name != "cosine":
            raise ValueError(f"optim.scheduler must be 'none' or 'cosine', got {name!r}")
        epochs = max(int(self.trainer.max_epochs or 1), 1)
        warmup = int(cfg.get("warmup_epochs") or 0)

        def factor(epoch: int) -> float:
            if epoch < warmup:
                return (epoch + 1) / (warmup + 1)
            progress = (epoch - warmup) / max(epochs - warmup, 1)
            return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}
