"""The options of the KG-embedding plausibility scorer (`.kge`), apart from it so that the
option checks (`gsr_train.options`) read them without torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gsr_train.config import option


@dataclass
class KGEConfig:
    model: str = option("DistMult", "the scorer: any class of torch_geometric.nn.kge (DistMult, TransE, ...)")
    dim: int = option(64, "embedding size", ge=1)
    epochs: int = option(40, "training epochs over the split's triples", ge=1)
    batch_size: int = option(2048, "triples per step", ge=1)
    lr: float = option(0.01, "Adam's learning rate", gt=0)
    weight_decay: float = option(0.0, "Adam's weight decay", ge=0)
    seed: int = option(0, "seed of the scorer's initialisation and negatives")

    @classmethod
    def from_any(cls, cfg: Mapping[str, Any] | KGEConfig | None) -> KGEConfig:
        if cfg is None:
            return cls()
        if isinstance(cfg, KGEConfig):  # no subclasses: the same test as isinstance(cfg, cls)
            return cfg
        unknown = set(cfg) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown kge options {sorted(unknown)} (known: {list(cls.__dataclass_fields__)})")
        return cls(**dict(cfg))
