"""The loss options of a trainable triple scorer (`gsr_train.models.edge_scorer.EdgeScorerModule`),
apart from the module so that the option checks (`gsr_train.options`) read them without torch."""

from __future__ import annotations

from dataclasses import dataclass

from gsr_train.config import option


@dataclass
class EdgeLoss:
    """The loss of a triple scorer: BCE (``pos_weight`` on positives) plus ``listwise`` times the
    softmax cross-entropy of each graph's positives against all of its triples."""

    pos_weight: float | None = option(None, "BCE weight of the positive triples (null: 1)", gt=0)
    listwise: float = option(0.0, "weight of the listwise term (softmax cross-entropy of each graph's positives)", ge=0)
    label_smoothing: float = option(
        0.0, "share of the listwise target spread uniformly over all of a graph's items (0: none)", ge=0, lt=1
    )
