"""LightningModule that trains the SubgraphRAG triple scorer: an
`gsr_train.models.edge_scorer.EdgeScorerModule` (the shared training and validation of
every trainable triple scorer: BCE plus an optional listwise term, validation triple
recall@``val_k`` as the monitor, DDP-merged validation scores, a reseed per step so resumed runs
match uninterrupted ones) with the SubgraphRAG scorer and its optimiser recipe.

Checkpoints carry everything needed to rebuild the scorer without the training config
(``save_hyperparameters``: architecture options, embedding ``dim``, encoder name and
vocabulary hashes in ``meta``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import torch

from gsr_train.config import defaults_of
from gsr_train.features.triple_batch import TripleBatch
from gsr_train.models.edge_scorer import DEFAULT_LOSS, EdgeScorerModule, listwise_loss
from gsr_train.models.subgraphrag.options import SubgraphRAGOptim
from gsr_train.models.subgraphrag.scorer import ScorerConfig, TripleScorer

__all__ = ["SubgraphRAGModule", "listwise_loss"]

log = logging.getLogger(__name__)

DEFAULT_OPTIM = {**defaults_of(SubgraphRAGOptim), "fused": True}


class SubgraphRAGModule(EdgeScorerModule):
    """``model``: scorer options (see `ScorerConfig.from_options`); ``dim``: text embedding size.

    Training, validation and checkpoints are the shared ones of
    `gsr_train.models.edge_scorer.EdgeScorerModule`; this class adds the scorer, its
    optimiser recipe (fused Adam, optional cosine schedule) and the reference forward of the benchmarks.
    """

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
        self.train_with(val_k, seed, {**DEFAULT_LOSS, **dict(loss or {})}, meta)
        if train_forward not in ("fast", "reference"):
            raise ValueError(f"train_forward must be 'fast' or 'reference', got {train_forward!r}")
        self.train_forward = train_forward  # "reference": concatenate-then-Linear (benchmarks only)

    @property
    def config(self) -> ScorerConfig:
        return self.scorer.config

    @property
    def structure(self) -> str:  # type: ignore[override]  # per instance: the scorer's options choose it
        return self.scorer.config.structure

    @property
    def dde_rounds(self) -> tuple[int, int]:  # type: ignore[override]
        return self.scorer.config.dde_forward, self.scorer.config.dde_reverse

    def forward(self, batch: TripleBatch) -> torch.Tensor:
        return self.scorer(batch)

    def training_logits(self, batch: TripleBatch) -> torch.Tensor:
        return self.scorer(batch) if self.train_forward == "fast" else self.scorer.forward_reference(batch)

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
