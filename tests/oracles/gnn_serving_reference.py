"""The GNN-RAG serving path as it was before it was vectorised (tests and benchmark only).

A verbatim copy of the old ``GNNRAG._reason`` / ``score_batch`` (with ``hop_distances``,
``shortest_path_scores``, ``trace_paths``) and of ``retrievers.edge_scorer``'s ``score_split`` /
``answer_rows`` / ``serve``: per-edge ``Linear`` layers on the gathered (question, relation)
rows, a Python loop per candidate and per path step to build the results rows. The fast path
(:func:`gsr_train.retrievers.edge_scorer.serve`) must give the same scores, answers, paths and
triple order; ``tests/test_gnn_rag.py`` and ``bench/bench_gnn_serving.py`` check that it does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.utils import scatter

from gsr_train.features.structure import node_features
from gsr_train.features.triple_batch import TripleBatch, make_batch
from gsr_train.kg.index import SplitGraphs
from gsr_train.models.edge_scorer import NodeCandidates
from gsr_train.retrievers.interface import ROW_FIELDS

ANSWERS_PER_QUESTION = 5

Candidate = tuple[int, float, tuple[int, ...]]


def follow_relations(head: torch.Tensor, tail: torch.Tensor, reach: torch.Tensor, follow: torch.Tensor) -> torch.Tensor:
    src, dst = torch.cat([head, tail]), torch.cat([tail, head])
    out = torch.zeros_like(reach)
    return out.scatter_reduce(0, dst, reach[src] * follow.repeat(2), reduce="amax", include_self=True)


def hop_distances(head: torch.Tensor, tail: torch.Tensor, topic: torch.Tensor, max_hops: int) -> torch.Tensor:
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


def shortest_path_scores(head, tail, topic, prob, max_hops, dist=None) -> torch.Tensor:
    far = max_hops + 1
    dist = hop_distances(head, tail, topic, max_hops) if dist is None else dist
    src, dst = torch.cat([head, tail]), torch.cat([tail, head])
    best = prob.detach().clone()
    on_dag = dist[dst] == dist[src] + 1
    for d in range(max_hops, 0, -1):
        m = on_dag & (dist[dst] == d)
        best = best.scatter_reduce(0, src[m], best[dst[m]], reduce="amax")
    depth = dist.float() / far * 1e-3
    forward = dist[tail] == dist[head] + 1
    backward = dist[head] == dist[tail] + 1
    off = -1.0 + 0.5 * torch.maximum(prob[head], prob[tail]).detach()
    return torch.where(forward, best[tail] + depth[tail], torch.where(backward, best[head] + depth[head], off)).float()


def trace_paths(head, tail, dist, nodes, max_hops, weight=None) -> torch.Tensor:
    t = torch.arange(head.numel(), device=head.device)
    fwd = dist[tail] == dist[head] + 1
    bwd = dist[head] == dist[tail] + 1
    child = torch.where(fwd, tail, head)
    on_dag = fwd | bwd
    if weight is not None:
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


def _mean_messages(x: torch.Tensor, edge_index: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
    """What the old ``MessagePassing.propagate`` (aggr "mean", message ``x_j * rel``) computed."""
    src, dst = edge_index[0], edge_index[1]
    return scatter(x.index_select(0, src) * rel, dst, dim=0, dim_size=x.shape[0], reduce="mean")


def _conv(conv, x: torch.Tensor, edge_index: torch.Tensor, rel_q: torch.Tensor) -> torch.Tensor:
    """The old ``QuestionRelationConv.forward``: its relation Linears applied to every triple's row."""
    fwd = _mean_messages(x, edge_index, conv.forward_rel(rel_q))
    rev = _mean_messages(x, edge_index.flip(0), conv.reverse_rel(rel_q))
    return conv.mix(torch.cat([fwd, rev], dim=-1))


def _topic(batch: TripleBatch) -> torch.Tensor:
    return batch.feat_rows[batch.node_frow, 0] > 0.5


def reason(module, batch: TripleBatch) -> tuple[torch.Tensor, torch.Tensor]:
    module = module.members[0]  # a single GNN (GNNRAG.members == 1), reasoning as it was before passes
    q = module.question(batch.q_emb)
    x = torch.cat([module.entity(batch.ent_emb), module.no_text[None]])[batch.node_ent]
    x = x + module.place(batch.feat_rows)[batch.node_frow]
    relation = module.relation(batch.rel_emb)[batch.pair_rel]
    edge_index = torch.stack([batch.head, batch.tail])
    reach = _topic(batch).to(x.dtype)
    reached, follows = [], []
    for i, (conv, norm) in enumerate(zip(module.rounds, module.norms)):
        pair_q = relation * module.instructions[i](batch.q_emb)[batch.pair_q]
        follow = torch.sigmoid(module.follow[i](pair_q)).squeeze(-1)[batch.triple_pair]
        reach = follow_relations(batch.head, batch.tail, reach, follow)
        reached.append(reach)
        follows.append(follow)
        x = x + module.reached[i](reach[:, None])
        x = norm(x + module.dropout(F.relu(_conv(conv, x, edge_index, pair_q[batch.triple_pair]))))
    logits = module.scorer(torch.cat([x * q[batch.node_q], x, torch.stack(reached, -1)], dim=-1)).squeeze(-1)
    return logits, torch.stack(follows)


def score_batch(module, batch: TripleBatch, n: int) -> tuple[torch.Tensor, NodeCandidates]:
    logits, follows = reason(module, batch)
    prob = torch.sigmoid(logits)
    topic = _topic(batch)
    dist = hop_distances(batch.head, batch.tail, topic, module.max_hops)
    nameless = batch.node_ent >= batch.ent_emb.shape[0]
    ranked = prob.masked_fill(topic | nameless, -1.0)
    order = torch.argsort(ranked, descending=True, stable=True)
    order = order[torch.argsort(batch.node_q[order], stable=True)]
    q = batch.node_q[order]
    counts = torch.bincount(q, minlength=batch.num_questions)
    rank = torch.arange(q.numel(), device=q.device) - (counts.cumsum(0) - counts)[q]
    keep = (rank < n) & (ranked[order] >= 0)
    nodes = order[keep]
    scores = shortest_path_scores(batch.head, batch.tail, topic, prob, module.max_hops, dist)
    depth = torch.maximum(dist[batch.head], dist[batch.tail]).clamp(1, follows.shape[0]) - 1
    weight = follows.gather(0, depth[None]).squeeze(0)
    paths = trace_paths(batch.head, batch.tail, dist, nodes, module.max_hops, weight)
    return scores, NodeCandidates(nodes, ranked[nodes], paths)


def score_split(module, split: SplitGraphs, question_emb: torch.Tensor, emb: Any, graphs_per_batch: int = 64):
    forward, reverse = module.dde_rounds
    features = node_features(split, str(module.structure), int(forward), int(reverse))
    device = next(module.parameters(), torch.empty(0)).device
    scores = torch.full((int(split.edge_ptr[-1]),), float("-inf"))
    n = len(split)
    answers: list[list[Candidate]] | None = None
    with torch.no_grad():
        for start in range(0, n, graphs_per_batch):
            questions = list(range(start, min(n, start + graphs_per_batch)))
            batch = make_batch(
                split, questions, features, question_emb, emb.entity, emb.entity_has_text, emb.relation, None
            )
            if device.type != "cpu":
                batch = batch.to(device)
            if batch.num_triples == 0:
                continue
            batch_scores, found = score_batch(module, batch, ANSWERS_PER_QUESTION)
            scores[batch.edge_ids.cpu()] = batch_scores.float().cpu()
            answers = answers if answers is not None else [[] for _ in range(n)]
            _collect(answers, split, batch, found)
    return scores, answers


def _collect(answers: list, split: SplitGraphs, batch: Any, found: NodeCandidates) -> None:
    nodes = found.nodes.cpu()
    entity = split.entity_ids[batch.nodes.cpu()[nodes]].tolist()
    owner = batch.questions.cpu()[batch.node_q.cpu()[nodes]].tolist()
    steps = found.paths.cpu()
    edge_ids = batch.edge_ids.cpu()[steps.clamp(min=0)]
    paths = [
        tuple(e for e, ok in zip(row, valid) if ok) for row, valid in zip(edge_ids.tolist(), (steps >= 0).tolist())
    ]
    for q, e, p, path in zip(owner, entity, found.prob.float().cpu().tolist(), paths):
        answers[q].append((int(e), float(p), path))


def path_text(split: SplitGraphs, q: int, entity: int, edges: Sequence[int], names: Any, relations: Any) -> str:
    n0 = int(split.ent_ptr[q])
    cur = entity
    parts: list[str] = [names(entity)]
    for e in reversed(edges):
        h, t = (int(n0 + x) for x in split.edge_index[:, e].tolist())
        h, t = int(split.entity_ids[h]), int(split.entity_ids[t])
        rel = relations(int(split.edge_rel[e]))
        prev, arrow = (h, "->") if t == cur else (t, "<-")
        parts = [names(prev), arrow, rel, arrow, *parts]
        cur = prev
    return " ".join(parts)


def answer_rows(index: Any, split: SplitGraphs, answers: list[list[Candidate]]) -> dict[str, list]:
    ids = {e for row in answers for e, _, path in row} | {
        int(split.entity_ids[int(split.ent_ptr[q]) + int(x)])
        for q, row in enumerate(answers)
        for _, _, path in row
        for e in path
        for x in split.edge_index[:, e].tolist()
    }
    order = sorted(ids)
    name_of = dict(zip(order, index.entities.take(order))) if order else {}
    relations = index.relations
    rows, paths = [], []
    for q, row in enumerate(answers):
        rows.append([{"name": name_of[e], "prob": round(p, 4)} for e, p, _ in row])
        paths.append(
            [path_text(split, q, e, path, name_of.__getitem__, relations.__getitem__) for e, _, path in row if path]
        )
    return {"answers": rows, "paths": paths}


def candidate_counts(split: SplitGraphs, answers: list[list[Candidate]]) -> dict[str, int]:
    from gsr_train.arrays import segment_sum

    topics = segment_sum(split.topic_mask.numpy().view(np.uint8), split.ent_ptr.numpy())
    return {
        "no_topic_entity": int((topics == 0).sum()),
        "no_candidate": sum(not row for row in answers),
        "candidates": sum(len(row) for row in answers),
        "candidates_without_path": sum(not path for row in answers for _, _, path in row),
    }


def serve(module, index: Any, split: SplitGraphs, question_emb: torch.Tensor, emb: Any, graphs_per_batch: int):
    """The old ``retrievers.edge_scorer.serve`` of a GNN-RAG module: scores and the rows' extras."""
    scores, answers = score_split(module, split, question_emb, emb, graphs_per_batch)
    extra: dict[str, Any] = {}
    if answers is not None:
        extra[ROW_FIELDS] = answer_rows(index, split, answers)
        extra.update(candidate_counts(split, answers))
    return scores, extra
