"""LightningModule for GSR: seq2seq loss, AdamW + warmup/decay, chain-match validation.

A batch holds B source sequences and T >= B target chains (``owner[t]`` = source of target
``t``): the encoder runs once per source and its states are gathered per target, so a
question with ten raw chains costs one encoder pass, not ten.

Validation logs ``val/loss`` and the ground-chain match of beam search at 1 and at n
(``val/match@1``, ``val/match@n``; share of validation questions with a ground chain whose
top-1 / top-n beams, before validity filtering, contain one of them). Checkpoints carry the
architecture, the relation list and the tokenizer files (``checkpoint["gsr"]``), so a
``.ckpt`` alone rebuilds the model: :func:`gsr_train.models.gsr.modeling.load_gsr`.

Distributed (DDP): each rank decodes its share of the validation questions and keeps one
``(match@1, match@n)`` pair per question id; the pairs are gathered from all ranks and
de-duplicated by id (the distributed sampler pads with repeats) before the shares are
computed, so the match figures cover every validation question exactly once.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.utilities.types import OptimizerLRScheduler
from transformers.modeling_outputs import BaseModelOutput

from gsr_train.config import defaults_of
from gsr_train.models.gsr.decoding import beam_chains
from gsr_train.models.gsr.options import DecodeConfig, GSROptim

log = logging.getLogger(__name__)

warnings.filterwarnings("ignore", message=r".*introduces a better way to train encoder-decoder models.*")

DEFAULT_OPTIM = defaults_of(GSROptim)
SCHEDULES = ("linear", "constant")


class GSRModule(pl.LightningModule):
    def __init__(
        self,
        gsr,
        optim: Mapping[str, Any] | None = None,
        val_decode: Mapping[str, Any] | None = None,
        total_steps: int | None = None,
        weighting: str = "question",
    ) -> None:
        super().__init__()
        if weighting not in ("question", "target"):
            raise ValueError(f"loss weighting must be 'question' or 'target', got {weighting!r}")
        self.weighting = weighting
        self.gsr = gsr
        self.optim = {**DEFAULT_OPTIM, **dict(optim or {})}
        if self.optim["schedule"] not in SCHEDULES:
            raise ValueError(f"optim.schedule must be one of {SCHEDULES}, got {self.optim['schedule']!r}")
        self.val_decode = DecodeConfig.from_any({"beams": 5, "top_n": 3, **dict(val_decode or {})})
        self.total_steps = total_steps
        self.save_hyperparameters(
            {
                "optim": {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.optim.items()},
                "val_decode": vars(self.val_decode),
                "spec": gsr.spec,
                "num_relations": len(gsr.relations),
                "weighting": weighting,
            }
        )
        self._match: dict[str, tuple[bool, bool]] = {}

    # ------------------------------------------------------------------ loss
    def loss(self, batch: Mapping[str, Any]) -> torch.Tensor | None:
        """Mean token cross-entropy per target chain, averaged over targets with weights.

        ``weighting="question"`` gives every source sequence the same total weight (a question
        with 20 raw chains does not count 20 times); ``"target"`` weighs every chain alike.
        """
        labels = batch["labels"]
        if labels.shape[0] == 0:
            return None
        model = self.gsr.model
        enc = model.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        owner = batch["owner"]
        hidden = enc.last_hidden_state.index_select(0, owner)
        mask = batch["attention_mask"].index_select(0, owner)
        start = torch.full_like(labels[:, :1], self.gsr.start_id)
        dec_in = torch.cat([start, labels[:, :-1].clamp_min(0)], dim=1)
        dec_in = torch.where(
            torch.cat([torch.ones_like(start, dtype=torch.bool), labels[:, :-1] >= 0], 1),
            dec_in,
            torch.full_like(dec_in, self.gsr.pad_id),
        )
        logits = model(
            encoder_outputs=BaseModelOutput(last_hidden_state=hidden), attention_mask=mask, decoder_input_ids=dec_in
        ).logits
        tok = torch.nn.functional.cross_entropy(
            logits.float().transpose(1, 2), labels, ignore_index=-100, reduction="none"
        )
        valid = (labels >= 0).float()
        per_target = (tok * valid).sum(1) / valid.sum(1).clamp_min(1)
        if self.weighting == "question":
            counts = torch.bincount(owner, minlength=int(batch["input_ids"].shape[0])).float()
            w = 1.0 / counts[owner]
        else:
            w = torch.ones_like(per_target)
        return (per_target * w).sum() / w.sum()

    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        if loss is None:
            return None
        n = int(batch["input_ids"].shape[0])
        self.log("train/loss", loss, prog_bar=True, batch_size=n)
        self.log("train/retrieval_share", batch["is_retrieval"].float().mean(), batch_size=n)
        return loss

    # ------------------------------------------------------------------ validation
    def on_validation_epoch_start(self) -> None:
        self._match = {}

    def validation_step(self, batch, batch_idx):
        n = int(batch["input_ids"].shape[0])
        loss = self.loss(batch)
        if loss is not None:
            self.log("val/loss", loss, prog_bar=True, batch_size=int(batch["labels"].shape[0]), sync_dist=True)
        keep = [i for i in range(n) if batch["ground"][i] and bool(batch["is_retrieval"][i])]
        if not keep:
            return
        questions = [batch["texts"][i] for i in keep]
        beams = beam_chains(self.gsr, questions, self.val_decode, device=self.device)
        top_n = self.val_decode.top_n
        for i, per_q in zip(keep, beams):
            ground = set(map(tuple, batch["ground"][i]))
            names = [self.gsr.chain_names(b.chain) if b.chain is not None else None for b in per_q]
            key = batch["ids"][i] or f"{batch['texts'][i]}#{i}"
            self._match[key] = (
                bool(names[:1] and names[0] in ground),
                any(c in ground for c in names[:top_n] if c is not None),
            )

    def _gathered_matches(self) -> dict[str, tuple[bool, bool]]:
        """Per-question matches of every rank, one entry per question id."""
        if self.trainer.world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
            return self._match
        parts: list = [None] * dist.get_world_size()
        dist.all_gather_object(parts, self._match)
        merged: dict[str, tuple[bool, bool]] = {}
        for part in parts:
            merged.update(part)
        return merged

    def on_validation_epoch_end(self) -> None:
        matches = self._gathered_matches()
        n = max(len(matches), 1)
        at1 = sum(a for a, _ in matches.values()) / n
        atn = sum(b for _, b in matches.values()) / n
        log.info(
            "epoch %d: val match@1 %.4f, match@%d %.4f (%d questions)",
            self.current_epoch,
            at1,
            self.val_decode.top_n,
            atn,
            len(matches),
        )
        # identical on every rank after the gather
        self.log("val/match@1", at1, prog_bar=True, sync_dist=True)
        self.log(f"val/match@{self.val_decode.top_n}", atn, sync_dist=True)
        self.log("val/match@n", atn, sync_dist=True)
        self.log("val/questions", float(len(matches)), sync_dist=True)

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self) -> OptimizerLRScheduler:
        lr = float(self.optim["lr"])
        enc_lr = float(self.optim.get("encoder_lr") or lr)
        groups: dict[tuple, list] = {}
        for name, p in self.gsr.named_parameters():
            if not p.requires_grad:
                continue
            plain = p.ndim < 2 or "LayerNorm" in name or "layer_norm" in name
            key = (
                enc_lr if name.startswith("model.encoder.") else lr,
                0.0 if plain else float(self.optim["weight_decay"]),
            )
            groups.setdefault(key, []).append(p)
        opt = torch.optim.AdamW(
            [{"params": ps, "lr": k[0], "weight_decay": k[1]} for k, ps in groups.items()],
            lr=lr,
            betas=tuple(self.optim["betas"]),
            eps=float(self.optim["eps"]),
        )
        if self.optim["schedule"] == "constant":
            return opt
        total = int(self.total_steps or self.trainer.estimated_stepping_batches)
        warm = self.optim.get("warmup_steps")
        warm = int(warm) if warm is not None else int(round(float(self.optim["warmup_ratio"]) * total))

        def factor(step: int) -> float:
            if warm > 0 and step < warm:
                return (step + 1) / warm
            return max(0.0, (total - step) / max(1, total - warm))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["gsr"] = self.gsr.checkpoint_state()


def best_checkpoint(dirpath: str | Path, monitor: str, has_val: bool) -> ModelCheckpoint:
    """The callback that keeps GSR's best epoch on ``monitor`` (``val/match@1`` or ``val/loss``:
    lower is better for a loss); without validation data, the last epoch."""
    return ModelCheckpoint(
        dirpath=str(dirpath),
        filename="best-epoch{epoch:02d}",
        auto_insert_metric_name=False,
        save_top_k=1,
        monitor=monitor if has_val else None,
        mode="min" if monitor.endswith("loss") else "max",
        save_last=False,
        enable_version_counter=False,
    )
