"""LightningModule for GSR: seq2seq loss, AdamW + warmup/decay, chain-match validation.

A batch holds B source sequences and T >= B target chains (``owner[t]`` = source of target
``t``): the encoder runs once per source and its states are gathered per target, so a
question with ten raw chains costs one encoder pass, not ten. With ``length_groups=G`` the
encoder runs on groups of G sources of similar length, each padded only to its own longest
(`encode_grouped`): the same states as one pass over the batch padded to its longest
source (to float rounding), at about half the encoder's cost on WebQSP questions; and the
decoder's cross-attention projects each source's keys and values once, gathering them per target
(`cross_kv_modules`), instead of projecting a copy of the states per target. With ``pack=True``
(a BERT-family encoder: MiniLM) the encoder reads the batch's sources end to end in rows as wide as
the longest source, each attending only to itself and counting its positions from 0
(`encode_packed`): the same states again, with no padding and one pass (length groups are
then not used; a T5 encoder, with relative positions, keeps them).

Validation logs ``val/loss`` and the ground-chain match of beam search at 1 and at n
(``val/match@1``, ``val/match@n``; share of validation questions with a ground chain whose
top-1 / top-n beams, before validity filtering, contain one of them). Checkpoints carry the
architecture, the relation list and the tokenizer files (``checkpoint["gsr"]``), so a
``.ckpt`` alone rebuilds the model: `gsr_train.models.gsr.modeling.load_gsr`.

Each validation also logs the 95% bootstrap interval of both match figures over the validation
questions (``val/match@1_low`` / ``_high``, `gsr_train.eval.intervals`) and appends the epoch's
figures to `GSRModule.curve` (the run writes it to ``val_curve.json``: the learning curve).

Distributed (DDP): each rank decodes its share of the validation questions and keeps one
``(match@1, match@n)`` pair per question id; the pairs are gathered from all ranks and
de-duplicated by id (the distributed sampler pads with repeats) before the shares are
computed, so the match figures cover every validation question exactly once.
"""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from pytorch_lightning.utilities.types import OptimizerLRScheduler
from transformers.modeling_outputs import BaseModelOutput

from gsr_train.config import defaults_of
from gsr_train.eval.intervals import QuestionValues
from gsr_train.memory import keep_freed_memory
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
        length_groups: int = 0,
        pack: bool = False,
        fused_adamw: bool = False,
    ) -> None:
        super().__init__()
        if weighting not in ("question", "target"):
            raise ValueError(f"loss weighting must be 'question' or 'target', got {weighting!r}")
        if int(length_groups) < 0:
            raise ValueError(f"length_groups must be >= 0, got {length_groups}")
        self.weighting = weighting
        self.length_groups = int(length_groups)
        self.pack = bool(pack)
        self.fused_adamw = bool(fused_adamw)
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
                "length_groups": self.length_groups,
                "pack": self.pack,
                "fused_adamw": self.fused_adamw,
            }
        )
        self._match: dict[str, tuple[bool, bool]] = {}
        self.curve: list[dict[str, Any]] = []  # one row per validation: epoch, step, match figures + intervals

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
        encoder = model.get_encoder()
        if self.pack and can_pack(encoder):
            states = encode_packed(encoder, batch["input_ids"], batch["attention_mask"])
        else:
            states = encode_grouped(encoder, batch["input_ids"], batch["attention_mask"], self.length_groups)
        owner = batch["owner"]
        hidden = states.index_select(0, owner)
        mask = batch["attention_mask"].index_select(0, owner)
        # fast path: each cross-attention's keys and values are projected once per source and then
        # gathered per target (the same numbers as projecting every target's copy of the states)
        shared = cross_kv_modules(model) if self.length_groups > 0 or self.pack else []
        hooks = [h for m in shared for h in _project_per_source(m, states, owner)]
        start = torch.full_like(labels[:, :1], self.gsr.start_id)
        dec_in = torch.cat([start, labels[:, :-1].clamp_min(0)], dim=1)
        dec_in = torch.where(
            torch.cat([torch.ones_like(start, dtype=torch.bool), labels[:, :-1] >= 0], 1),
            dec_in,
            torch.full_like(dec_in, self.gsr.pad_id),
        )
        try:
            logits = model(
                encoder_outputs=BaseModelOutput(last_hidden_state=hidden), attention_mask=mask, decoder_input_ids=dec_in
            ).logits
        finally:
            for hook in hooks:
                hook.remove()
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

    def on_train_start(self) -> None:
        # each step's logits over the whole vocabulary, their log-softmax and their gradients are tens
        # of MB (over glibc's mmap threshold): freed blocks are kept for the next step, not mapped and
        # page-faulted in again (the quickstart: 26 of 94 s in the kernel before, 2 of 70 s after)
        keep_freed_memory()

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
        # full precision under a mixed-precision trainer: the chains that pick the best epoch are
        # decoded as the scored split is after training
        with torch.autocast(self.device.type, enabled=False):
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
        top_n = self.val_decode.top_n
        row = match_figures(matches, top_n)
        log.info(
            "epoch %d: val match@1 %.4f (%.3f-%.3f), match@%d %.4f (%.3f-%.3f) (%d questions)",
            self.current_epoch,
            row["match@1"],
            row["match@1_low"],
            row["match@1_high"],
            top_n,
            row[f"match@{top_n}"],
            row[f"match@{top_n}_low"],
            row[f"match@{top_n}_high"],
            len(matches),
        )
        # identical on every rank after the gather
        self.log("val/match@1", row["match@1"], prog_bar=True, sync_dist=True)
        for key, value in row.items():
            if key != "match@1":
                self.log(f"val/{key}", value, sync_dist=True)
        self.log("val/match@n", row[f"match@{top_n}"], sync_dist=True)
        self.log("val/questions", float(len(matches)), sync_dist=True)
        if not self.trainer.sanity_checking:
            self.curve.append({"epoch": int(self.current_epoch), "step": int(self.global_step), **row})

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
            # the same update as the per-parameter loop (to float rounding), a quarter of its time on a CPU
            fused=self.fused_adamw,
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
        checkpoint["gsr_curve"] = list(self.curve)  # a resumed run's val_curve.json keeps the earlier epochs

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.curve = list(checkpoint.get("gsr_curve", []))


def encode_grouped(encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor, group: int = 0) -> torch.Tensor:
    """The encoder's ``[B, L, H]`` states of a right-padded batch, run on groups of ``group`` sources
    of similar length (sorted by length), each group padded only to its own longest source.

    A source's states do not depend on the other sources of its pass (attention is masked, no batch
    statistics), so at every real token these are the states of one pass over the whole batch up to
    float rounding; padding positions differ (zeros past a group's longest source) and are masked
    wherever they are read. ``group=0``, a batch
    of at most ``group`` sources, or a mask that is not right padding: one pass.
    """
    n = int(input_ids.shape[0])
    lengths = attention_mask.sum(1)
    right_padded = bool((attention_mask.cumprod(1).sum(1) == lengths).all())
    if group <= 0 or n <= group or not right_padded:
        return encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    order = torch.argsort(lengths, descending=True, stable=True)
    width = int(input_ids.shape[1])
    parts = []
    for start in range(0, n, group):
        rows = order[start : start + group]
        size = max(1, int(lengths[rows[0]]))  # the group's longest: sorted longest first
        states = encoder(input_ids=input_ids[rows, :size], attention_mask=attention_mask[rows, :size]).last_hidden_state
        parts.append(torch.nn.functional.pad(states, (0, 0, 0, width - size)))
    return torch.cat(parts).index_select(0, torch.argsort(order))


def can_pack(encoder) -> bool:
    """Whether `encode_packed` can run ``encoder``: absolute positions given as ``position_ids``
    (BERT family) and an attention that takes a per-row ``[rows, 1, W, W]`` mask (sdpa or eager)."""
    takes_positions = "position_ids" in inspect.signature(encoder.forward).parameters
    absolute = getattr(encoder.config, "position_embedding_type", "absolute") == "absolute"
    attention = getattr(encoder.config, "_attn_implementation", None)
    return takes_positions and absolute and attention in ("sdpa", "eager")


def pack_rows(lengths: list[int], width: int) -> tuple[list[int], list[int], int]:
    """First-fit decreasing: each source's row and offset in rows of ``width`` tokens, and the rows."""
    room: list[int] = []
    row, offset = [0] * len(lengths), [0] * len(lengths)
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        r = next((r for r, left in enumerate(room) if left >= lengths[i]), len(room))
        if r == len(room):
            room.append(width)
        row[i], offset[i] = r, width - room[r]
        room[r] -= lengths[i]
    return row, offset, len(room)


def encode_packed(encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The encoder's ``[B, L, H]`` states of a right-padded batch, computed with the sources packed end
    to end into rows as wide as the longest (`pack_rows`): a block-diagonal attention mask keeps
    each source to itself and its positions count from 0, so at every real token these are the states
    of one padded pass (to float rounding), with no padding; zeros at the padding positions."""
    n, width = input_ids.shape
    real = attention_mask.bool()
    lengths = real.sum(1)
    longest = max(1, int(lengths.max()))
    row, offset, rows = pack_rows(lengths.tolist(), longest)
    pos = torch.arange(width, device=input_ids.device).expand(n, width)
    start = torch.tensor(row, device=pos.device) * longest + torch.tensor(offset, device=pos.device)
    slot = (start.unsqueeze(1) + pos)[real]  # each real token's place in the packed rows
    source = torch.arange(n, device=pos.device).unsqueeze(1).expand(n, width)[real]
    cells = rows * longest
    states = encoder(
        input_ids=input_ids.new_zeros(cells).index_put_((slot,), input_ids[real]).view(rows, longest),
        attention_mask=_block_mask(pos.new_full((cells,), -1).index_put_((slot,), source).view(rows, longest), encoder),
        position_ids=pos.new_zeros(cells).index_put_((slot,), pos[real]).view(rows, longest),
    ).last_hidden_state
    out = states.new_zeros(n, width, states.shape[-1])
    out[real] = states.reshape(cells, -1).index_select(0, slot)
    return out


def _block_mask(segment: torch.Tensor, encoder) -> torch.Tensor:
    """``[rows, 1, W, W]``: a token attends to the tokens of its own source (padding to padding, so no
    row is empty); boolean for sdpa, additive for eager attention."""
    same = segment.unsqueeze(1).unsqueeze(-1) == segment.unsqueeze(1).unsqueeze(2)
    if encoder.config._attn_implementation == "sdpa":
        return same
    dtype = encoder.get_input_embeddings().weight.dtype
    return torch.zeros(same.shape, dtype=dtype, device=same.device).masked_fill(~same, torch.finfo(dtype).min)


CROSS_KV = (".crossattention.self.key", ".crossattention.self.value", ".EncDecAttention.k", ".EncDecAttention.v")


def cross_kv_modules(model) -> list[torch.nn.Module]:
    """The key and value projections of the decoder's cross-attention (BERT and T5 decoders); empty for
    a decoder of another kind (the loss then copies the encoder states per target)."""
    if getattr(model, "enc_to_dec_proj", None) is not None:  # the decoder reads projected states
        return []
    return [m for name, m in model.named_modules() if name.endswith(CROSS_KV) and isinstance(m, torch.nn.Linear)]


def _project_per_source(module: torch.nn.Module, states: torch.Tensor, owner: torch.Tensor) -> list:
    """Hooks on a cross-attention projection: it reads the per-source ``states`` instead of the
    per-target copy it is given, and its output is gathered per target (``owner[t]``)."""
    return [
        module.register_forward_pre_hook(lambda mod, args: (states,)),
        module.register_forward_hook(lambda mod, args, output: output.index_select(0, owner)),
    ]


def match_figures(matches: Mapping[str, tuple[bool, bool]], top_n: int) -> dict[str, float]:
    """match@1 and match@``top_n`` over the questions of ``matches`` (id -> (hit at 1, hit in the top
    n)), each with its 95% bootstrap interval (``_low`` / ``_high``); all 0 without questions, as
    before intervals (a NaN monitor would stop a run with early stopping)."""
    ids = sorted(matches)
    values = QuestionValues(ids)
    values.add_mean("match@1", [float(matches[q][0]) for q in ids])
    values.add_mean(f"match@{top_n}", [float(matches[q][1]) for q in ids])
    out: dict[str, float] = {}
    for name, est in values.estimates().items():
        out[name] = est.value or 0.0
        out[f"{name}_low"] = est.low or 0.0
        out[f"{name}_high"] = est.high or 0.0
    return out


def early_stopping(monitor: str, patience: int) -> EarlyStopping:
    """Stop after ``patience`` validations without a better ``monitor`` (``val/match@1``: higher is
    better; a loss: lower)."""
    return EarlyStopping(
        monitor=monitor, mode="min" if monitor.endswith("loss") else "max", patience=int(patience), verbose=False
    )


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
