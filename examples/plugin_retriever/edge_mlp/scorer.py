"""A trainable triple scorer as a gsr-train plugin.

gsr-train's ``EdgeScorerModule`` supplies the training loop, validation recall, checkpoints
and serving; a method writes only its model. This one scores a triple (h, r, t) of a question
q with an MLP over [z_q * z_h, z_q * z_r, z_q * z_t, topic(h), topic(t)], where z are frozen
text embeddings (an entity without text gets a learned vector) and topic marks the question's
topic entities.

The first layer is linear, so it is applied part by part, as SubgraphRAG's scorer does: the head
and tail parts once per node, the relation part once per (question, relation) pair, then summed
per triple. That is the same function as concatenating the five parts per triple, but a triple's
hidden layer is three gathered rows instead of a product with a ``3d + 2`` wide row: an epoch on the
embedded data trains three times faster (2.5 -> 0.8 s).
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
        d = self.no_text.numel()
        w_head, w_rel, w_tail, w_topic = self.mlp[0].weight.split([d, d, d, 2], dim=1)
        nodes = torch.cat([batch.ent_emb, self.no_text[None]])[batch.node_ent]  # [N, d]
        q_nodes = batch.q_emb[batch.node_q] * nodes  # z_q * z_node, once per node
        topic = batch.feat_rows[batch.node_frow, :1]  # [N, 1]
        heads = q_nodes @ w_head.T + topic * w_topic[:, 0]  # [N, hidden]
        tails = q_nodes @ w_tail.T + topic * w_topic[:, 1]
        pairs = (batch.q_emb[batch.pair_q] * batch.rel_emb[batch.pair_rel]) @ w_rel.T + self.mlp[0].bias
        hidden = heads[batch.head] + pairs[batch.triple_pair] + tails[batch.tail]  # [T, hidden]
        return self.mlp[2](self.mlp[1](hidden)).squeeze(-1)
