"""The GSR optimiser's options as a typed dataclass: the one source of their defaults (the module
fills what a model file leaves out from it; ``gsr_train.runs.recipes`` checks ``model.optim``)."""

from __future__ import annotations

from dataclasses import dataclass

from gsr_train.config import at_least, between, one_of


@dataclass
class GSROptim:
    lr: float = at_least(0, 5e-4, above=True)
    encoder_lr: float | None = at_least(0, None, above=True)  # MiniLM: the pretrained encoder's own rate
    weight_decay: float = at_least(0, 0.01)
    warmup_ratio: float = between(0, 1, 0.06)
    warmup_steps: int | None = at_least(0, None)  # instead of warmup_ratio
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = at_least(0, 1e-8, above=True)
    schedule: str = one_of("linear", "linear", "constant")
