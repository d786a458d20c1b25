"""A GNN-RAG style retriever: a question-conditioned GNN scores answer nodes, and the evidence is
the shortest paths from the topic entities to the likeliest answers.

Reasoning (in the spirit of ReaRev): nodes start from their text embedding plus a topic-entity
flag; each of ``rounds`` rounds passes messages along every triple in both directions
(:class:`QuestionRelationConv`, a ``torch_geometric`` ``MessagePassing``), each message the
sender's state gated by its relation's embedding multiplied with the question's, and a node
scorer reads ``[h * q, h]``. Training is node-level: BCE on the answer entities plus the
listwise term (softmax cross-entropy of each graph's answer nodes against all of its nodes);
graphs without a usable answer are skipped by the shared datamodule and counted there.

Evidence (:func:`shortest_path_scores`): a breadth-first pass from the topic nodes gives every
node its hop distance; the edges from distance d to d + 1 form the shortest-path DAG; each node
takes the best answer probability below it in that DAG, and a triple on the DAG scores that
value (deeper edges first among equals), so the top triples are the shortest paths to the most
probable answers. Triples off every shortest path rank after all of them. All of it is tensor
work over the whole batch of graphs, on CPU or CUDA.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import MessagePassing

from gsr_train.features.triple_batch import TripleBatch
from gsr_train.models.edge_scorer import EdgeScorerModule


class QuestionRelationConv(MessagePassing):
    """One reasoning round: ``mean_j (x_j * rel_ij)`` along the triples, forward and reverse."""

    def __init__(self, hidden: int) -> None:
        super().__init__(aggr="mean")
        self.forward_rel = nn.Linear(hidden, hidden)
        self.reverse_rel = nn.Linear(hidden, hidden)
        self.mix = nn.Linear(2 * hidden, hidden)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, rel_q: torch.Tensor) -> torch.Tensor:
        fwd = self.propagate(edge_index, x=x, rel=self.forward_rel(rel_q))
        rev = self.propagate(edge_index.flip(0), x=x, rel=self.reverse_rel(rel_q))
        return self.mix(torch.cat([fwd, rev], dim=-1))

    def message(self, x_j: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        return x_j * rel


def shortest_path_scores(
    head: torch.Tensor, tail: torch.Tensor, topic: torch.Tensor, prob: torch.Tensor, max_hops: int
) -> torch.Tensor:
    """``[T]`` evidence scores of a batch's triples from its nodes' answer probabilities ``prob [N]``."""
    n = prob.numel()
    far = max_hops + 1
    dist = torch.full((n,), far, dtype=torch.long, device=prob.device)
    dist[topic] = 0
    src, dst = torch.cat([head, tail]), torch.cat([tail, head])
    for d in range(1, max_hops + 1):
        reach = dst[dist[src] == d - 1]
        reach = reach[dist[reach] > d]
        if reach.numel() == 0:
            break
        dist[reach] = d
    best = prob.detach().clone()
    on_dag = dist[dst] == dist[src] + 1
    for d in range(max_hops, 0, -1):  # children at depth d are final once depth d + 1 is done
        m = on_dag & (dist[dst] == d)
        best = best.scatter_reduce(0, src[m], best[dst[m]], reduce="amax")
    depth = dist.float() / far * 1e-3  # among equals, the edge nearer the answer first
    forward = dist[tail] == dist[head] + 1
    backward = dist[head] == dist[tail] + 1
    off = -1.0 + 0.5 * torch.maximum(prob[head], prob[tail]).detach()
    return torch.where(forward, best[tail] + depth[tail], torch.where(backward, best[head] + depth[head], off)).float()


class GNNRAG(EdgeScorerModule):
    """``dim``: text embedding size; ``hidden``, ``rounds`` (reasoning rounds), ``dropout``, ``lr``;
    ``max_hops``: how far from the topic entities evidence paths reach."""

    structure = "topic"  # [is_topic, not_topic] per node

    def __init__(
        self, dim: int, hidden: int = 128, rounds: int = 3, dropout: float = 0.1, lr: float = 1e-3, max_hops: int = 4
    ) -> None:
        super().__init__()
        if hidden < 1 or rounds < 1 or max_hops < 1:
            raise ValueError(f"hidden, rounds and max_hops must be >= 1, got {hidden}, {rounds}, {max_hops}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.lr, self.max_hops = float(lr), int(max_hops)
        self.question = nn.Linear(dim, hidden)
        self.entity = nn.Linear(dim, hidden)
        self.no_text = nn.Parameter(torch.zeros(hidden))
        self.topic = nn.Linear(2, hidden)
        self.relation = nn.Linear(dim, hidden)
        self.rounds = nn.ModuleList(QuestionRelationConv(hidden) for _ in range(rounds))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(rounds))
        self.dropout = nn.Dropout(dropout)
        self.scorer = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def node_logits(self, batch: TripleBatch) -> torch.Tensor:
        """``[N]`` answer logits of every node of the batch's graphs."""
        q = self.question(batch.q_emb)
        x = torch.cat([self.entity(batch.ent_emb), self.no_text[None]])[batch.node_ent]
        x = x + self.topic(batch.feat_rows[batch.node_frow])
        rel_q = self.relation(batch.rel_emb)[batch.pair_rel[batch.triple_pair]] * q[batch.triple_question()]
        edge_index = torch.stack([batch.head, batch.tail])
        for conv, norm in zip(self.rounds, self.norms):
            x = norm(x + self.dropout(F.relu(conv(x, edge_index, rel_q))))
        return self.scorer(torch.cat([x * q[batch.node_q], x], dim=-1)).squeeze(-1)

    def forward(self, batch: TripleBatch) -> torch.Tensor:
        return self._evidence(batch, torch.sigmoid(self.node_logits(batch)))

    def _evidence(self, batch: TripleBatch, prob: torch.Tensor) -> torch.Tensor:
        topic = batch.feat_rows[batch.node_frow, 0] > 0.5
        return shortest_path_scores(batch.head, batch.tail, topic, prob, self.max_hops)

    def score_batch(self, batch: TripleBatch, n: int) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The evidence scores and the ``n`` likeliest non-topic answer nodes of each question, best
        first, from one pass of the GNN."""
        prob = torch.sigmoid(self.node_logits(batch))
        topic = batch.feat_rows[batch.node_frow, 0] > 0.5
        ranked = prob.masked_fill(topic, -1.0)
        order = torch.argsort(ranked, descending=True, stable=True)
        order = order[torch.argsort(batch.node_q[order], stable=True)]  # by question, best first within
        q = batch.node_q[order]
        counts = torch.bincount(q, minlength=batch.num_questions)
        rank = torch.arange(q.numel(), device=q.device) - (counts.cumsum(0) - counts)[q]
        keep = (rank < n) & (ranked[order] >= 0)
        return self._evidence(batch, prob), (order[keep], ranked[order][keep])

    def training_targets(self, batch: TripleBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Node-level: every node's answer logit against its answer flag, grouped by question."""
        if batch.node_answer is None:
            raise ValueError("GNN-RAG trains on answer nodes: batches need node_answer")
        return self.node_logits(batch), batch.node_answer, batch.node_q
