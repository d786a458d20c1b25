"""The GSR model's options as typed dataclasses (the optimiser, beam decoding): the one source of their
defaults (the module fills what a model file leaves out from them; ``gsr_train.options`` checks
``model.optim`` and ``gsr.decode`` against them without importing torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gsr_train.config import option


@dataclass
class GSROptim:
    lr: float = option(5e-4, "AdamW's learning rate", gt=0)
    encoder_lr: float | None = option(None, "MiniLM: the pretrained encoder's own learning rate (null: lr)", gt=0)
    weight_decay: float = option(0.01, "AdamW's weight decay", ge=0)
    warmup_ratio: float = option(0.06, "share of the optimiser steps spent warming up", ge=0, le=1)
    warmup_steps: int | None = option(None, "warm-up steps, instead of warmup_ratio (null: the ratio)", ge=0)
    betas: tuple[float, float] = option((0.9, 0.999), "AdamW's betas", strict=False)
    eps: float = option(1e-8, "AdamW's epsilon", gt=0)
    schedule: Literal["linear", "constant"] = option(
        "linear", "learning rate after the warm-up: linear decay or constant"
    )


@dataclass
class DecodeConfig:
    beams: int = option(10, "beams of the beam search", ge=1)
    top_n: int = option(3, "chains kept per question (validation; a run's test chains are its top_k)", ge=1)
    max_hops: int = option(3, "most relations per chain", ge=1)
    constrained: bool = option(False, "only chains the question's graph can execute")
    shortest: bool = option(True, "constrained: every hop moves one hop farther from the topic entities")
    restrict_vocab: bool = option(True, "only relation tokens and EOS may be generated")
    length_penalty: float = option(1.0, "exponent of the length normalisation of beam scores (as in HF)")
    batch_size: int = option(32, "questions decoded at once", ge=1)

    @classmethod
    def from_any(cls, cfg) -> DecodeConfig:
        if cfg is None:
            return cls()
        if isinstance(cfg, cls):
            return cfg
        known = {k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg}
        unknown = set(dict(cfg).keys()) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown decoding options {sorted(unknown)} (known: {list(cls.__dataclass_fields__)})")
        out = cls(**known)
        if out.beams < 1 or out.top_n < 1 or out.max_hops < 1:
            raise ValueError(f"beams, top_n and max_hops must be >= 1, got {out}")
        return out
