"""A GNN-RAG style retriever: a question-conditioned GNN scores answer nodes, and the evidence is
the shortest paths from the topic entities to the likeliest answers.

Reasoning (in the spirit of ReaRev): nodes start from their text embedding plus their
directional distance encoding (DDE: where they sit relative to the topic entities); each of
``rounds`` rounds passes messages along every triple in both directions
(`QuestionRelationConv`, a ``torch_geometric`` ``MessagePassing``), each message the
sender's state gated by its relation's embedding multiplied with that round's instruction (its
own projection of the question), and a node scorer reads ``[h * q, h]``. Answer candidates are
the nodes with a name (not a topic entity, not a nameless CVT node). Training is node-level: BCE
on the answer entities plus the listwise term (softmax cross-entropy of each graph's answer nodes
against all of its nodes); graphs without a usable answer are skipped by the shared datamodule and counted there.

Evidence (`shortest_path_scores`): a breadth-first pass from the topic nodes gives every
node its hop distance; the edges from distance d to d + 1 form the shortest-path DAG; each node
takes the best answer probability below it in that DAG, and a triple on the DAG scores that
value (deeper edges first among equals), so the top triples are the shortest paths to the most
probable answers. Triples off every shortest path rank after all of them. Each candidate's path
(`trace_paths`) follows one DAG edge per hop back to a topic entity. All of it is tensor
work over the whole batch of graphs, on CPU or CUDA.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import softmax

from gsr_train.arrays import scatter
from gsr_train.features.structure import dde_channels
from gsr_train.features.triple_batch import TripleBatch
from gsr_train.models.edge_scorer import EdgeScorerModule, NodeCandidates
from gsr_train.models.gnn_rag_kernels import Incoming, incoming, relation_means


class QuestionRelationConv(MessagePassing):
    """One reasoning round: ``mean_j (x_j * rel_ij)`` along the triples, forward and reverse.

    The relation gates are projected per (question, relation) pair (``rel_pair [P, hidden]``) and
    gathered per triple through ``triple_pair [T]``: the same rows as projecting every triple's copy
    of its pair, without a ``[T, hidden]`` matrix product per direction. Without gradients (serving,
    validation) and with ``into`` (each direction's `gsr_train.models.gnn_rag_kernels.Incoming`)
    the means are summed straight into one ``[N, 2 * hidden]`` buffer
    (`gsr_train.models.gnn_rag_kernels.relation_means`: the same numbers as ``propagate``)."""

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


def parent_edges(
    head: torch.Tensor, tail: torch.Tensor, dist: torch.Tensor, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """``[N]`` each reached node's one incoming edge of the shortest-path DAG (``-1``: a topic node
    or not reached): the one of highest ``weight [T]``, the last listed among equals."""
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
    return parent.scatter_reduce(0, child[on_dag], t[on_dag], reduce="amax")


def trace_paths(
    head: torch.Tensor,
    tail: torch.Tensor,
    dist: torch.Tensor,
    nodes: torch.Tensor,
    max_hops: int,
    weight: torch.Tensor | None = None,
    parent: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[M, max_hops]`` one shortest path from a topic node to each of ``nodes``: triple positions
    from the topic outwards, ``-1`` padding; a node no topic reaches gets an empty row.

    Every reached node keeps one incoming edge of the shortest-path DAG (`parent_edges`),
    so a path is ``dist[node]`` lookups, done for all candidates at once (``parent``: those edges,
    when the caller has them already)."""
    parent = parent_edges(head, tail, dist, weight) if parent is None else parent
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


def path_tree_scores(
    head: torch.Tensor,
    tail: torch.Tensor,
    topic: torch.Tensor,
    prob: torch.Tensor,
    max_hops: int,
    dist: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    bonus: float = 1.0,
    parent: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[T]`` evidence scores that spend the budget on one path per answer first: every reached
    node's one DAG edge in (`parent_edges`, the edges `trace_paths` writes) forms a
    tree from the topic entities; a tree edge scores ``bonus +`` the best answer probability below
    it in the tree, any other shortest-path edge the best probability below it in the DAG (as
    `shortest_path_scores`), the rest after all of them. ``bonus = 1``: the one paths to
    the most probable answers before any other path; smaller: an alternative path to a likely
    answer may come before the one path to an unlikely one (more shortest-path triples, fewer
    answers covered)."""
    dist = hop_distances(head, tail, topic, max_hops) if dist is None else dist
    dag = shortest_path_scores(head, tail, topic, prob, max_hops, dist)
    parent = parent_edges(head, tail, dist, weight) if parent is None else parent
    has = parent >= 0
    node = torch.arange(dist.numel(), device=dist.device)
    e = parent.clamp(min=0)
    up = torch.where(head[e] == node, tail[e], head[e])  # the node's parent in the tree
    best = prob.detach().float().clone()
    for d in range(max_hops, 0, -1):  # a node's subtree is final once the deeper levels are done
        m = has & (dist == d)
        best = best.scatter_reduce(0, up[m], best[m], reduce="amax")
    depth = dist.float() / (max_hops + 1) * 1e-3  # among equals, the edge nearer the answer first
    tree = torch.zeros_like(dag, dtype=torch.bool)
    tree[parent[has]] = True
    score = dag.clone()
    score[parent[has]] = bonus + best[node[has]] + depth[node[has]]
    return torch.where(tree, score, dag).float()


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


class Reasoner(nn.Module):
    """One question-conditioned GNN: ``rounds`` instruction-following message-passing rounds over
    the question graphs, then a node scorer (the whole reasoning of a `GNNRAG` member).

    ``passes > 1`` is ReaRev's adaptive reasoning: after a pass, each question's node states pooled
    under that pass's answer distribution (a softmax of its node logits over the question's graph)
    update every round's instruction, and reasoning starts again from the initial node states with
    the updated instructions; the last pass's logits are the answer."""

    def __init__(
        self,
        dim: int,
        dde: int,
        hidden: int,
        rounds: int,
        dropout: float,
        passes: int,
        relation_init: bool = False,
        similarity: bool = False,
    ) -> None:
        super().__init__()
        self.passes = int(passes)
        self.question = nn.Linear(dim, hidden)
        self.instructions = nn.ModuleList(nn.Linear(dim, hidden) for _ in range(rounds))
        self.entity = nn.Linear(dim, hidden)
        self.no_text = nn.Parameter(torch.zeros(hidden))
        self.place = nn.Linear(dde, hidden)
        self.relation = nn.Linear(dim, hidden)
        self.rounds = nn.ModuleList(QuestionRelationConv(hidden) for _ in range(rounds))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(rounds))
        self.follow = nn.ModuleList(nn.Linear(hidden, 1) for _ in range(rounds))
        self.reached = nn.ModuleList(nn.Linear(1, hidden) for _ in range(rounds))
        self.dropout = nn.Dropout(dropout)
        self.scorer = nn.Sequential(
            nn.Linear(2 * hidden + rounds + int(similarity), hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )
        # created last so that passes=1 draws the same initial weights as before the option existed
        self.adapt = nn.ModuleList(nn.Linear(2 * hidden, hidden) for _ in range(rounds)) if passes > 1 else None
        # NSM / ReaRev: a node also starts from the relations of its triples (a type signal text lacks)
        self.relation_in = nn.Linear(dim, 2 * hidden) if relation_init else None
        # the frozen encoder's own question-relation and question-entity similarities: a prior that
        # 852 training graphs cannot learn from the projected embeddings alone
        self.similar_follow = nn.ModuleList(nn.Linear(1, 1) for _ in range(rounds)) if similarity else None

    def forward(self, batch: TripleBatch, topic: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The node logits and ``[rounds, T]`` how strongly each round follows each triple (last pass).

        Without gradients (serving, validation) the ``[N, hidden]`` temporaries are updated in place
        and the scorer's input is written into one buffer: the same sums (addition commutes
        exactly), fewer passes over memory."""
        fast = not torch.is_grad_enabled()
        q = self.question(batch.q_emb)
        x0 = torch.cat([self.entity(batch.ent_emb), self.no_text[None]])[batch.node_ent]
        place = self.place(batch.feat_rows)[batch.node_frow]
        x0 = x0.add_(place) if fast else x0 + place
        if self.relation_in is not None:
            x0 = x0 + _relation_means(batch, self.relation_in)
        relation = self.relation(batch.rel_emb)[batch.pair_rel]  # [P, hidden]: per (question, relation)
        edge_index = torch.stack([batch.head, batch.tail])
        # each node's incoming triples along head -> tail and tail -> head: the same for every round
        # and pass, so the no-gradient message passing sorts the batch's triples once
        into = (
            (incoming(batch.tail, x0.shape[0], x0.dtype), incoming(batch.head, x0.shape[0], x0.dtype)) if fast else None
        )
        instructions = [lin(batch.q_emb) for lin in self.instructions]  # [Q, hidden] per round
        sims = text_similarities(batch) if self.similar_follow is not None else None
        for p in range(self.passes):
            last = p == self.passes - 1
            logits, follows, x = self._pass(batch, topic, x0, q, relation, instructions, edge_index, into, fast, sims)
            if not last:
                instructions = self._adapted(batch, instructions, logits, x)
        return logits, follows

    def _pass(
        self,
        batch: TripleBatch,
        topic: torch.Tensor,
        x: torch.Tensor,
        q: torch.Tensor,
        relation: torch.Tensor,
        instructions: list[torch.Tensor],
        edge_index: torch.Tensor,
        into: tuple[Incoming, Incoming] | None,
        fast: bool,
        sims: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One reasoning pass from the node states ``x`` (not changed: a later pass starts from them
        again): logits, follows, the final node states. ``into``: the no-gradient message passing's
        incoming triples (None with gradients); ``sims``: `text_similarities` or None."""
        reach = topic.to(x.dtype)
        reached, follows = [], []
        for i, (conv, norm) in enumerate(zip(self.rounds, self.norms)):
            pair_q = relation * instructions[i][batch.pair_q]
            gate = self.follow[i](pair_q)
            if sims is not None and self.similar_follow is not None:
                gate = gate + self.similar_follow[i](sims[0][:, None])
            follow = torch.sigmoid(gate).squeeze(-1)[batch.triple_pair]
            reach = follow_relations(batch.head, batch.tail, reach, follow)
            reached.append(reach)
            follows.append(follow)
            step = self.reached[i](reach[:, None])
            x = step.add_(x) if fast else x + step
            h = self.dropout(F.relu(conv(x, edge_index, pair_q, batch.triple_pair, into), inplace=fast))
            x = norm(h.add_(x) if fast else x + h)
        columns = reached if sims is None else [*reached, sims[1]]
        logits = self.scorer(_scorer_input(x, q[batch.node_q], columns, fast)).squeeze(-1)
        return logits, torch.stack(follows), x

    def _adapted(
        self, batch: TripleBatch, instructions: list[torch.Tensor], logits: torch.Tensor, x: torch.Tensor
    ) -> list[torch.Tensor]:
        """Each round's instruction updated from the node states pooled under the answer distribution."""
        assert self.adapt is not None
        weight = softmax(logits, batch.node_q, num_nodes=batch.num_questions)
        pooled = scatter(weight[:, None] * x, batch.node_q, dim=0, dim_size=batch.num_questions, reduce="sum")
        return [ins + lin(torch.cat([ins, pooled], dim=-1)) for ins, lin in zip(instructions, self.adapt)]


def _relation_means(batch: TripleBatch, project: nn.Linear) -> torch.Tensor:
    """``[N, hidden]`` each node's mean projected relation text embedding over the triples it is the
    tail of plus that over those it is the head of (zero where it has none). The relation table is
    projected first (``[V, 2 * hidden]``), so the per-triple rows are ``hidden`` wide, not ``dim``."""
    rel = project(batch.rel_emb)[batch.pair_rel[batch.triple_pair]]  # [T, 2 * hidden]
    n, hidden = int(batch.node_ent.shape[0]), rel.shape[1] // 2
    into = scatter(rel[:, :hidden], batch.tail, dim=0, dim_size=n, reduce="mean")
    return into + scatter(rel[:, hidden:], batch.head, dim=0, dim_size=n, reduce="mean")


def text_similarities(batch: TripleBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """``[P]`` the cosine similarity of each (question, relation) pair's text embeddings and ``[N]``
    that of each node's entity text with its question (0 for nodes without text). The node values
    come from one table of the batch's distinct entities against its questions, so no ``[N, dim]``
    gather is made (``ent_emb`` may be the whole entity table: only the rows in use are read)."""
    q = F.normalize(batch.q_emb.float(), dim=-1)
    rel = F.normalize(batch.rel_emb.float(), dim=-1)
    pair = (q[batch.pair_q] * rel[batch.pair_rel]).sum(-1)
    used, row = torch.unique(batch.node_ent, return_inverse=True)
    has = used < batch.ent_emb.shape[0]  # the last id stands for "no text"
    ent = q.new_zeros(used.numel(), q.shape[1])
    ent[has] = F.normalize(batch.ent_emb[used[has]].float(), dim=-1)
    node = (ent @ q.T)[row, batch.node_q]  # [used, Q] table, then one value per node
    return pair.to(batch.q_emb.dtype), node.to(batch.q_emb.dtype)


def _mean_probability_logit(logits: torch.Tensor) -> torch.Tensor:
    """``[N]`` the logit of the members' mean answer probability (``logits [M, N]``)."""
    return torch.logit(torch.sigmoid(logits).mean(0), eps=1e-6)


class GNNRAG(EdgeScorerModule):
    """``dim``: text embedding size; ``hidden``, ``rounds`` (reasoning rounds), ``dropout``, ``lr``;
    ``max_hops``: how far from the topic entities evidence paths reach; ``passes``: reasoning passes
    with adaptive instructions (ReaRev; 1: none); ``members``: independently initialised GNNs trained
    side by side, each on its own loss, whose answer probabilities are averaged (a seed ensemble in
    one checkpoint; 1: a single GNN); ``path_bonus``: how far ahead of the other shortest-path
    triples each node's one path from a topic entity ranks (`path_tree_scores`; 0: every
    shortest-path triple by the best answer probability below it, `shortest_path_scores`;
    1: every node's one path before any other); ``relation_init``: every node's initial state also
    reads the mean text embedding of the relations it is the tail of and of those it is the head of
    (NSM / ReaRev's relation-based entity initialisation); ``similarity``: the frozen encoder's
    question-relation cosine joins every round's follow gate and the question-entity cosine the
    node scorer's input (`text_similarities`); ``path_supervision``: the weight of NSM's
    intermediate supervision (`step_loss`: each round's follow gates against the shortest-path
    triples of its hop; 0: none)."""

    structure = "dde"  # column 0 is the topic flag; the rest says where a node sits relative to it
    targets = "nodes"  # trains on the answer entities: graphs without one in them are skipped

    def __init__(
        self,
        dim: int,
        hidden: int = 128,
        rounds: int = 3,
        dropout: float = 0.1,
        lr: float = 1e-3,
        max_hops: int = 4,
        passes: int = 1,
        members: int = 1,
        path_bonus: float = 0.0,
        relation_init: bool = False,
        similarity: bool = False,
        path_supervision: float = 0.0,
    ) -> None:
        super().__init__()
        if hidden < 1 or rounds < 1 or max_hops < 1 or passes < 1 or members < 1:
            raise ValueError(
                f"hidden, rounds, max_hops, passes and members must be >= 1, got {hidden}, {rounds}, {max_hops}, "
                f"{passes}, {members}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if not 0.0 <= path_bonus <= 1.0:
            raise ValueError(f"path_bonus must be in [0, 1], got {path_bonus}")
        if path_supervision < 0:
            raise ValueError(f"path_supervision must be >= 0, got {path_supervision}")
        self.lr, self.max_hops, self.path_bonus = float(lr), int(max_hops), float(path_bonus)
        self.path_supervision = float(path_supervision)
        dde = dde_channels(*self.dde_rounds)
        self.members = nn.ModuleList(
            Reasoner(dim, dde, hidden, rounds, dropout, passes, relation_init, similarity) for _ in range(members)
        )

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Checkpoints of single GNNs saved before ``members`` existed name their weights without
        the ``members.0.`` prefix: read as the first member."""
        if state_dict and not any(key.startswith("members.") for key in state_dict):
            state_dict = {f"members.0.{key}": value for key, value in state_dict.items()}
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def node_logits(self, batch: TripleBatch) -> torch.Tensor:
        """``[N]`` answer logits of every node of the batch's graphs."""
        return self._reason(batch)[0]

    def _member_outputs(self, batch: TripleBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """``[M, N]`` every member's node logits and ``[M, rounds, T]`` its follows."""
        topic = self._topic(batch)
        outs = [member(batch, topic) for member in self.members]
        return torch.stack([o[0] for o in outs]), torch.stack([o[1] for o in outs])

    def _reason(self, batch: TripleBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The node logits and ``[rounds, T]`` how strongly each round follows each triple; with
        several members, the logit of their mean probability and their mean follows."""
        if len(self.members) == 1:
            return self.members[0](batch, self._topic(batch))
        logits, follows = self._member_outputs(batch)
        return _mean_probability_logit(logits), follows.mean(0)

    def forward(self, batch: TripleBatch) -> torch.Tensor:
        return self.score_batch(batch, 0)[0]

    def _evidence(
        self, batch: TripleBatch, topic: torch.Tensor, prob: torch.Tensor, dist: torch.Tensor, parent: torch.Tensor
    ) -> torch.Tensor:
        if self.path_bonus:
            h, t, hops, bonus = batch.head, batch.tail, self.max_hops, self.path_bonus
            return path_tree_scores(h, t, topic, prob, hops, dist, bonus=bonus, parent=parent)
        return shortest_path_scores(batch.head, batch.tail, topic, prob, self.max_hops, dist)

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
        # the step into depth d prefers the triple round d follows most (the last round beyond)
        depth = torch.maximum(dist[batch.head], dist[batch.tail]).clamp(1, follows.shape[0]) - 1
        weight = follows.gather(0, depth[None]).squeeze(0)
        parent = parent_edges(batch.head, batch.tail, dist, weight)  # the one path into each node
        scores = self._evidence(batch, topic, prob, dist, parent)
        paths = trace_paths(batch.head, batch.tail, dist, nodes, self.max_hops, parent=parent)
        return scores, NodeCandidates(nodes, ranked[nodes], paths)

    def training_step(self, batch: TripleBatch, batch_idx: int) -> torch.Tensor:
        """The answer loss (the base class's, per member); with ``path_supervision``, plus that times
        `step_loss`, from the same forward pass."""
        if not self.path_supervision:
            return super().training_step(batch, batch_idx)
        if batch.node_answer is None or batch.labels is None:
            raise ValueError("GNN-RAG's path supervision needs node_answer and the shortest-path triple labels")
        logits, follows = self._member_outputs(batch)
        m = logits.shape[0]
        answer = self.loss_on(
            logits.reshape(-1), batch.node_answer.repeat(m), batch.node_q.repeat(m), batch.num_questions
        )
        steps = self.step_loss(batch, follows)
        self.log("train/step_loss", steps, batch_size=batch.num_questions)
        loss = answer + self.path_supervision * steps
        self.log("train/loss", loss, batch_size=batch.num_questions, prog_bar=True)
        return loss

    def step_loss(self, batch: TripleBatch, follows: torch.Tensor) -> torch.Tensor:
        """NSM's intermediate supervision: round ``i``'s follow gate (``follows [M, rounds, T]``) on
        the triples that step from hop ``i`` to hop ``i + 1`` of the topic entities (the last round:
        from every deeper hop too), against whether the triple lies on a shortest path to an answer
        (``batch.labels``); BCE, mean over the triples each round is asked about."""
        assert batch.labels is not None
        dist = hop_distances(batch.head, batch.tail, self._topic(batch), self.max_hops)
        step = torch.minimum(dist[batch.head], dist[batch.tail])  # hop of the triple's nearer end
        on_dag = (dist[batch.head] - dist[batch.tail]).abs() == 1
        rounds = follows.shape[1]
        asked = on_dag[None] & (step.clamp(max=rounds - 1)[None] == torch.arange(rounds, device=step.device)[:, None])
        target = batch.labels.to(follows.dtype)[None].expand(rounds, -1)
        p = follows.clamp(1e-6, 1 - 1e-6)
        per = F.binary_cross_entropy(p, target.expand_as(p), reduction="none")  # [M, rounds, T]
        mask = asked[None].expand_as(per)
        return per[mask].mean() if bool(mask.any()) else per.sum() * 0.0

    def training_targets(self, batch: TripleBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Node-level: every node's answer logit against its answer flag, grouped by question; with
        several members, each member's logits in turn (the labels and groups repeated), so that
        `loss_on` trains each on its own loss."""
        if batch.node_answer is None:
            raise ValueError("GNN-RAG trains on answer nodes: batches need node_answer")
        if len(self.members) == 1:
            return self.node_logits(batch), batch.node_answer, batch.node_q
        logits = self._member_outputs(batch)[0]
        m = logits.shape[0]
        return logits.reshape(-1), batch.node_answer.repeat(m), batch.node_q.repeat(m)

    def loss_on(self, logits: torch.Tensor, labels: torch.Tensor, group: torch.Tensor, num_groups: int) -> torch.Tensor:
        """The members' mean loss, each member's the base class's (an ensemble, not a wider model)."""
        m = len(self.members)
        if m == 1:
            return super().loss_on(logits, labels, group, num_groups)
        parts = zip(logits.chunk(m), labels.chunk(m), group.chunk(m))
        return torch.stack([super(GNNRAG, self).loss_on(lo, la, g, num_groups) for lo, la, g in parts]).mean()
