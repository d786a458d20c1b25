"""The SubgraphRAG model's options as typed dataclasses: the one source of their defaults.

The defaults are the paper's (``conf/model/subgraphrag_paper.yaml`` restates them); the other
model files override them. ``gsr_train.runs.recipes`` checks a composed ``model`` section against
:class:`SubgraphRAGModel` (unknown keys, types, ranges) before any work; the module and the runner
fill what a config leaves out from these classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gsr_train.config import at_least, between, one_of
from gsr_train.models.edge_scorer import EdgeLoss


@dataclass
class SubgraphRAGOptim:
    lr: float = at_least(0, 1e-3, above=True)
    weight_decay: float = at_least(0, 0.0)
    scheduler: str = one_of("none", "none", "cosine")
    warmup_epochs: int = at_least(0, 0)


@dataclass
class SubgraphRAGTrain:
    graphs_per_batch: int = at_least(1, 1)
    epochs: int = at_least(1, 30)
    patience: int | None = at_least(0, 6)
    val_k: int = at_least(1, 100)
    optim: SubgraphRAGOptim = field(default_factory=SubgraphRAGOptim)
    loss: EdgeLoss = field(default_factory=EdgeLoss)


@dataclass
class DDERounds:
    forward_rounds: int = at_least(0, 2)
    reverse_rounds: int = at_least(0, 2)


@dataclass
class SubgraphRAGModel:
    """conf/model/subgraphrag*.yaml (the architecture is checked again by ScorerConfig)."""

    name: str = "subgraphrag_paper"
    family: str = "subgraphrag"
    hidden: int = at_least(1, 1024)
    num_layers: int = at_least(1, 1)
    dropout: float = between(0, 1, 0.0)
    use_dde: bool = True
    use_topic: bool = True
    structure: str | None = one_of(None, None, "dde", "topic", "none")
    dde: DDERounds = field(default_factory=DDERounds)
    dde_forward: int | None = at_least(0, None)
    dde_reverse: int | None = at_least(0, None)
    cos_features: bool = False
    qr_product: bool = False
    qe_product: bool = False
    fused: bool = False
    train_projection_dtype: str = one_of("float32", "float32", "bfloat16")
    train: SubgraphRAGTrain = field(default_factory=SubgraphRAGTrain)
