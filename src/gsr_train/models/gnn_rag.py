"""A GNN-RAG style retriever: a question-conditioned GNN scores answer nodes, and the evidence is
the shortest paths from the topic entities to the likeliest answers.

Reasoning (in the spirit of ReaRev): nodes start from their text embedding plus their
directional distance encoding (DDE: where they sit relative to the topic entities); each of
``rounds`` rounds passes messages along every triple in both directions
(:class:`QuestionRelationConv`, a ``torch_geometric`` ``MessagePassing``), each message the
sender's state gated by its relation's embedding multiplied with that round's instruction (its
own projection of the question), and a node scorer reads ``[h * q, h]``. Answer candidates are
the nodes with a name (not a topic entity, not a nameless CVT node). Training is node-level: BCE
on the answer entities plus the listwise term (softmax cross-entropy of each graph's answer nodes
against all of its nodes); graphs without a usable answer are skipped by the shared datamodule and counted there.

Evidence (:func:`shortest_path_scores`): a breadth-first pass from the topic nodes gives every
node its hop distance; the edges from distance d to d + 1 form the shortest-path DAG; each node
takes the best answer probability below it in that DAG, and a triple on the DAG scores that
value (deeper edges first among equals), so the top triples are the shortest paths to the most
probable answers. Triples off every shortest path rank after all of them. Each candidate's path
(:func:`trace_paths`) follows one DAG edge per hop back to a topic entity. All of it is tensor
work over the whole batch of graphs, on CPU or CUDA.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import MessagePassing

from gsr_train.features.structure import dde_channels
from gsr_train.features.triple_batch import TripleBatch
from gsr_train.models.edge_scorer import EdgeScorerModule, NodeCandidates
from gsr_train.models.gnn_rag_kernels import Incoming, incoming, relation_means


class QuestionRelationConv(MessagePassing):
    """One reasoning round: ``mean_j (x_j * rel_ij)`` along the triples, forward and reverse.

    The relation gates are projected per (question, relation) pair (``rel_pair [P, hidden]``) and
    gathered per triple through ``triple_pair [T]``: the same rows as projecting every triple's copy
    of its pair, without a ``[T, hidden]`` matrix product per direction. Without gradients (serving,
    validation) and with ``into`` (each direction's :class:`~gsr_train.models.gnn_rag_kernels.Incoming`)
    the means are summed straight into one ``[N, 2 * hidden]`` buffer
    (:func:`~gsr_train.models.gnn_rag_kernels.relation_means`: the same numbers as ``propagate``)."""

    def __init__(self, hidden: int) -> None:
        super().__init__(aggr="mean")
        self.forward_rel = nn.Linear(hidden, hidden)
        self.reverse_rel = nn.Linear(hidden, hidden)
        self.mix = nn.Linear(2 * hidden, hidden)

    def forward(
        self,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        rel_pair: torch.Tensor,
        triple_pair: torch.Tensor,
        into: tuple[Incoming, Incoming] | None = None,
    ) -> torch.Tensor:
        fwd_rel, rev_rel = self.forward_rel(rel_pair), self.reverse_rel(rel_pair)
        if into is None or torch.is_grad_enabled():
            fwd = self.propagate(edge_index, x=x, rel=fwd_rel, pair=triple_pair)
            rev = self.propagate(edge_index.flip(0), x=x, rel=rev_rel, pair=triple_pair)
            return self.mix(torch.cat([fwd, rev], dim=-1))
        both = x.new_empty((x.shape[0], 2 * x.shape[1]))
        relation_means(both, x, triple_pair, [(fwd_rel, edge_index[0], into[0]), (rev_rel, edge_index[1], into[1])])
        return self.mix(both)

    def message(self, x_j: torch.Tensor, rel: torch.Tensor, pair: torch.Tensor) -> torch.Tensor:
        return x_j * rel.index_select(0, pair)


def follow_relations(head: torch.Tensor, tail: torch.Tensor, reach: torch.Tensor, follow: torch.Tensor) -> torch.Tensor:
    """``[N]`` one reasoning step: how strongly each node is reached from the nodes reached so far
    (``reach [N]``) over a triple the question wants followed (``follow [T]`` in [0, 1]), either
    direction; the strongest way in counts (NSM / ReaRev's instruction-following distribution)."""
    src, dst = torch.cat([head, tail]), torch.cat([tail, head])
    out = torch.zeros_like(reach)
    return out.scatter_reduce(0, dst, reach[src] * follow.repeat(2), reduce="amax", include_self=True)


def hop_distances(head: torch.Tensor, tail: torch.Tensor, topic: torch.Tensor, max_hops: int) -> torch.Tensor:
    """``[N]`` hops from the nearest topic node along triples in either direction (``max_hops + 1``:
    not reached)."""
    dist = torch.full((topic.numel(),), max_hops + 1, dtype=torch.long, device=topic.device)
    dist[topic] = 0
    src, dst = torch.cat([head, tail]), torch.cat([tail, head])
    for d in range(1, max_hops + 1):
        reach = dst[dist[src] == d - 1]
        reach = reach[dist[reach] > d]
        if reach.numel() == 0:
            break
        dist[reach] = d
    return dist


def shortest_path_scores(
    head: torch.Tensor,
    tail: torch.Tensor,
    topic: torch.Tensor,
    prob: torch.Tensor,
    max_hops: int,
    dist: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[T]`` evidence scores of a batch's triples from its nodes' answer probabilities ``prob [N]``."""
    far = max_hops + 1
    dist = hop_distances(head, tail, topic, max_hops) if dist is None else dist
    src, dst = torch.cat([head, tail]), torch.cat([tail, head])
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


def trace_paths(
    head: torch.Tensor,
    tail: torch.Tensor,
    dist: torch.Tensor,
    nodes: torch.Tensor,
    max_hops: int,
    weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[M, max_hops]`` one shortest path from a topic node to each of ``nodes``: triple positions
    from the topic outwards, ``-1`` padding; a node no topic reaches gets an empty row.

    Every reached node keeps one incoming edge of the shortest-path DAG, the one of highest
    ``weight [T]`` (the last listed among equals), so a path is ``dist[node]`` lookups, done for
    all candidates at once."""
    t = torch.arange(head.numel(), device=head.device)
    fwd = dist[tail] == dist[head] + 1  # head is the parent of tail
    bwd = dist[head] == dist[tail] + 1
    child = torch.where(fwd, tail, head)
    on_dag = fwd | bwd
    if weight is not None:  # keep, per child, only its best-weighted edges
        w = weight.detach().float()
        best = torch.full((dist.numel(),), float("-inf"), device=dist.device)
        best = best.scatter_reduce(0, child[on_dag], w[on_dag], reduce="amax")
        on_dag = on_dag & (w >= best[child])
    parent = torch.full((dist.numel(),), -1, dtype=torch.long, device=dist.device)
    parent = parent.scatter_reduce(0, child[on_dag], t[on_dag], reduce="amax")
    out = torch.full((nodes.numel(), max_hops), -1, dtype=torch.long, device=dist.device)
    cur = nodes.clone()
    steps = dist[nodes].clamp(max=max_hops + 1)
    reached = steps <= max_hops
    for step in range(max_hops):
        live = reached & (step < steps) & (parent[cur] >= 0)
        edge = torch.where(live, parent[cur], torch.full_like(cur, -1))
        slot = (steps - 1 - step).clamp(min=0)
        out[live, slot[live]] = edge[live]
        nxt = torch.where(head[edge.clamp(min=0)] == cur, tail[edge.clamp(min=0)], head[edge.clamp(min=0)])
        cur = torch.where(live, nxt, cur)
    return out


def _scorer_input(x: torch.Tensor, q: torch.Tensor, reached: list[torch.Tensor], fast: bool) -> torch.Tensor:
    """``[x * q, x, reached...]`` per node: concatenated (autograd), or written into one buffer
    (``fast``: no gradients; no ``x * q`` temporary and no copy of it)."""
    if not fast:
        return torch.cat([x * q, x, torch.stack(reached, -1)], dim=-1)
    hidden = x.shape[1]
    out = x.new_empty((x.shape[0], 2 * hidden + len(reached)))
    torch.mul(x, q, out=out[:, :hidden])
    out[:, hidden : 2 * hidden] = x
    out[:, 2 * hidden :] = torch.stack(reached, -1)
    return out


class GNNRAG(EdgeScorerModule):
    """``dim``: text embedding size; ``hidden``, ``rounds`` (reasoning rounds), ``dropout``, ``lr``;
    ``max_hops``: how far from the topic entities evidence paths reach."""

    structure = "dde"  # column 0 is the topic flag; the rest says where a node sits relative to it
    targets = "nodes"  # trains on the answer entities: graphs without one in them are skipped

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
        self.instructions = nn.ModuleList(nn.Linear(dim, hidden) for _ in range(rounds))
        self.entity = nn.Linear(dim, hidden)
        self.no_text = nn.Parameter(torch.zeros(hidden))
        self.place = nn.Linear(dde_channels(*self.dde_rounds), hidden)
        self.relation = nn.Linear(dim, hidden)
        self.rounds = nn.ModuleList(QuestionRelationConv(hidden) for _ in range(rounds))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(rounds))
        self.follow = nn.ModuleList(nn.Linear(hidden, 1) for _ in range(rounds))
        self.reached = nn.ModuleList(nn.Linear(1, hidden) for _ in range(rounds))
        self.dropout = nn.Dropout(dropout)
        self.scorer = nn.Sequential(nn.Linear(2 * hidden + rounds, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def node_logits(self, batch: TripleBatch) -> torch.Tensor:
        """``[N]`` answer logits of every node of the batch's graphs."""
        return self._reason(batch)[0]

    def _reason(self, batch: TripleBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The node logits and ``[rounds, T]`` how strongly each round follows each triple.

        Without gradients (serving, validation) the ``[N, hidden]`` temporaries are updated in place
        and the scorer's input is written into one buffer: the same sums (addition commutes
        exactly), fewer passes over memory."""
        fast = not torch.is_grad_enabled()
        q = self.question(batch.q_emb)
        x = torch.cat([self.entity(batch.ent_emb), self.no_text[None]])[batch.node_ent]
        place = self.place(batch.feat_rows)[batch.node_frow]
        x = x.add_(place) if fast else x + place
        relation = self.relation(batch.rel_emb)[batch.pair_rel]  # [P, hidden]: per (question, relation)
        edge_index = torch.stack([batch.head, batch.tail])
        into = self._incoming(batch, x.shape[0], x.dtype) if fast else None
        reach = self._topic(batch).to(x.dtype)
        reached, follows = [], []
        for i, (conv, norm) in enumerate(zip(self.rounds, self.norms)):
            pair_q = relation * self.instructions[i](batch.q_emb)[batch.pair_q]
            follow = torch.sigmoid(self.follow[i](pair_q)).squeeze(-1)[batch.triple_pair]
            reach = follow_relations(batch.head, batch.tail, reach, follow)
            reached.append(reach)
            follows.append(follow)
            step = self.reached[i](reach[:, None])
            x = step.add_(x) if fast else x + step
            h = self.dropout(F.relu(conv(x, edge_index, pair_q, batch.triple_pair, into), inplace=fast))
            x = norm(h.add_(x) if fast else x + h)
        logits = self.scorer(_scorer_input(x, q[batch.node_q], reached, fast)).squeeze(-1)
        return logits, torch.stack(follows)

    def forward(self, batch: TripleBatch) -> torch.Tensor:
        prob = torch.sigmoid(self.node_logits(batch))
        return shortest_path_scores(batch.head, batch.tail, self._topic(batch), prob, self.max_hops)

    @staticmethod
    def _incoming(batch: TripleBatch, num_nodes: int, dtype: torch.dtype) -> tuple[Incoming, Incoming]:
        """Each node's incoming triples along head -> tail and tail -> head: the same for every
        round, so the no-gradient message passing sorts the batch's triples once, not per round."""
        return incoming(batch.tail, num_nodes, dtype), incoming(batch.head, num_nodes, dtype)

    @staticmethod
    def _topic(batch: TripleBatch) -> torch.Tensor:
        return batch.feat_rows[batch.node_frow, 0] > 0.5

    def score_batch(self, batch: TripleBatch, n: int) -> tuple[torch.Tensor, NodeCandidates]:
        """The evidence scores and the ``n`` likeliest named non-topic nodes of each question, best
        first, each with its shortest path from a topic entity, from one pass of the GNN."""
        logits, follows = self._reason(batch)
        prob = torch.sigmoid(logits)
        topic = self._topic(batch)
        dist = hop_distances(batch.head, batch.tail, topic, self.max_hops)
        nameless = batch.node_ent >= batch.ent_emb.shape[0]
        ranked = prob.masked_fill(topic | nameless, -1.0)
        order = torch.argsort(ranked, descending=True, stable=True)
        order = order[torch.argsort(batch.node_q[order], stable=True)]  # by question, best first within
        q = batch.node_q[order]
        counts = torch.bincount(q, minlength=batch.num_questions)
        rank = torch.arange(q.numel(), device=q.device) - (counts.cumsum(0) - counts)[q]
        keep = (rank < n) & (ranked[order] >= 0)
        nodes = order[keep]
        scores = shortest_path_scores(batch.head, batch.tail, topic, prob, self.max_hops, dist)
        # the step into depth d prefers the triple round d follows most (the last round beyond)
        depth = torch.maximum(dist[batch.head], dist[batch.tail]).clamp(1, follows.shape[0]) - 1
        weight = follows.gather(0, depth[None]).squeeze(0)
        paths = trace_paths(batch.head, batch.tail, dist, nodes, self.max_hops, weight)
        return scores, NodeCandidates(nodes, ranked[nodes], paths)

    def training_targets(self, batch: TripleBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Node-level: every node's answer logit against its answer flag, grouped by question."""
        if batch.node_answer is None:
            raise ValueError("GNN-RAG trains on answer nodes: batches need node_answer")
        return self.node_logits(batch), batch.node_answer, batch.node_q
