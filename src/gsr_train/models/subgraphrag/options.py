"""The SubgraphRAG model's options as typed dataclasses: the one source of their defaults.

The defaults are the paper's (``conf/model/subgraphrag_paper.yaml`` restates them); the other
model files override them. ``gsr_train.options`` checks a composed ``model`` section against
`SubgraphRAGModel` (unknown keys, types, ranges) before any work; the module and the runner
fill what a config leaves out from these classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gsr_train.config import option
from gsr_train.models.edge_options import EdgeLoss


@dataclass
class SubgraphRAGOptim:
    lr: float = option(1e-3, "Adam's learning rate", gt=0)
    weight_decay: float = option(0.0, "Adam's weight decay", ge=0)
    scheduler: Literal["none", "cosine"] = option("none", "learning-rate schedule over the epochs")
    warmup_epochs: int = option(0, "epochs of linear warm-up before the schedule", ge=0)


@dataclass
class SubgraphRAGTrain:
    graphs_per_batch: int = option(1, "question graphs per optimiser step (the global batch, see batch_scope)", ge=1)
    epochs: int = option(30, "training epochs (trainer.max_epochs follows this one)", ge=1)
    patience: int | None = option(
        6, "epochs without a better validation recall before stopping (null: never stop early)", ge=0
    )
    val_k: int = option(100, "the K of the validation recall that picks the best checkpoint (val/sp_recall@K)", ge=1)
    optim: SubgraphRAGOptim = option(SubgraphRAGOptim(), "the optimiser")
    loss: EdgeLoss = option(EdgeLoss(), "the training loss: BCE plus an optional listwise term")


@dataclass
class DDERounds:
    forward_rounds: int = option(2, "directional distance encoding: rounds along the edges", ge=0)
    reverse_rounds: int = option(2, "directional distance encoding: rounds against the edges", ge=0)


@dataclass
class SubgraphRAGModel:
    """conf/model/subgraphrag*.yaml (the architecture is checked again by ScorerConfig)."""

    name: str = option("subgraphrag_paper", "the model file's name (conf/model/NAME.yaml)")
    family: str = option("subgraphrag", "the model family (the runner that trains it)")
    hidden: int = option(1024, "width of the MLP's hidden layers", ge=1)
    num_layers: int = option(1, "hidden layers of the MLP", ge=1)
    dropout: float = option(0.0, "dropout in the MLP", ge=0, le=1)
    use_dde: bool = option(True, "structural input: directional distance encoding from the topic entities")
    use_topic: bool = option(True, "structural input without DDE: a topic-entity flag (paper: MLP + topic entity)")
    structure: Literal["dde", "topic", "none"] | None = option(
        None, "the structural input by name, instead of use_dde / use_topic (null: from those two)"
    )
    dde: DDERounds = option(DDERounds(), "rounds of the directional distance encoding")
    dde_forward: int | None = option(None, "DDE rounds along the edges, instead of dde.forward_rounds", ge=0)
    dde_reverse: int | None = option(None, "DDE rounds against the edges, instead of dde.reverse_rounds", ge=0)
    cos_features: bool = option(False, "add cos(q,h), cos(q,r), cos(q,t) as three scalar inputs")
    qr_product: bool = option(False, "add z_q * z_r through the first layer (per question and relation: cheap)")
    qe_product: bool = option(False, "add z_q * z_h and z_q * z_t (per question and entity: costly)")
    fused: bool = option(False, "torch.compile the per-triple stage (same numbers; the blocked op is faster on CPU)")
    train_projection_dtype: Literal["float32", "bfloat16"] = option(
        "float32", "dtype of the first layer's projections while training"
    )
    train: SubgraphRAGTrain = option(SubgraphRAGTrain(), "the training recipe")
