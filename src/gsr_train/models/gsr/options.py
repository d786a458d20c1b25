"""The GSR optimiser's options as a typed dataclass: the one source of their defaults (the module
fills what a model file leaves out from it; ``gsr_train.options`` checks ``model.optim``)."""

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
