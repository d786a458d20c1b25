"""A trainable triple scorer as a gsr-train plugin.

gsr-train's ``EdgeScorerModule`` supplies the training loop, validation recall, checkpoints
and serving; a method writes only its model. This one scores a triple (h, r, t) of a question
q with an MLP over [z_q * z_h, z_q * z_r, z_q * z_t, topic(h), topic(t)], where z are frozen
text embeddings (an entity without text gets a learned vector) and topic marks the question's
topic entities.
"""

from __future__ import annotations

import torch
from torch import nn

from gsr_train.features.triple_batch import TripleBatch
from gsr_train.models.edge_scorer import EdgeScorerModule


class EdgeMLP(EdgeScorerModule):
    structure = "topic"  # the batches carry a one-hot "is a topic entity" per node

    def __init__(self, dim: int, hidden: int = 64, lr: float = 3e-3) -> None:
        super().__init__()
        if hidden < 1:
            raise ValueError(f"hidden must be >= 1, got {hidden}")
        self.lr = lr
        self.no_text = nn.Parameter(torch.zeros(dim))
        self.mlp = nn.Sequential(nn.Linear(3 * dim + 2, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, batch: TripleBatch) -> torch.Tensor:
        nodes = torch.cat([batch.ent_emb, self.no_text[None]])[batch.node_ent]  # [N, d]
        topic = batch.feat_rows[batch.node_frow, :1]  # [N, 1]
        q = batch.q_emb[batch.triple_question()]  # [T, d]
        r = batch.rel_emb[batch.pair_rel[batch.triple_pair]]
        h, t = nodes[batch.head], nodes[batch.tail]
        x = torch.cat([q * h, q * r, q * t, topic[batch.head], topic[batch.tail]], dim=-1)
        return self.mlp(x).squeeze(-1)
