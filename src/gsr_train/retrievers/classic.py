"""Classic untrained retrievers on prizes from frozen text embeddings (OKGQA / G-Retriever).

OKGQA's graph-guided retrieval (papers/okgqa.txt, sec. 4.1) and G-Retriever score the
question against every node and edge text with the same encoder (cosine), turn the top-k
similarities into prizes, and then retrieve

* ``triplets``: the triples with the highest total prize ``p_h + p_r + p_t``;
* ``paths``: greedy prize-cost paths ``S(P) = sum p_v + sum p_e - sum c_e`` grown from
  high-prize start nodes, avoiding cycles, bounded length and number (best-first search,
  here run as a beam search over all questions at once: at every step each question keeps
  its ``beam`` best partial paths);
* ``pcst``: one connected prize-collecting Steiner tree (`gsr_train.retrievers.pcst`).

Prizes: node text is the entity name (raw Freebase ids have none: prize 0), edge text the
relation name. ``rank`` prizes are ``max(0, k - rank)`` over a question's nodes / edges
(OKGQA); ``split`` edge prizes rank the *distinct* relation similarities and share each
rank's prize among the edges that carry it, strictly decreasing (G-Retriever), so one
frequent relation cannot flood the prize budget. A tiny multiple of the raw similarity
breaks ties. Optional personalised PageRank pruning (`gsr_train.retrievers.ppr`) runs
first. Every method returns per-edge scores (``FloatTensor[sum E]``, ``-inf`` = not
retrieved) so results go through the common results format and metrics; for ``paths`` and
``pcst`` the score is minus the edge's position in the retrieved structure (best path
first; breadth-first from the tree's best node), so every top-K prefix of a PCST tree is
connected.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping
from typing import Any

import torch

from gsr_train.arrays import scatter, segment_count
from gsr_train.config import defaults_of
from gsr_train.kg.index import DEFAULT_CHUNK_EDGES, SplitGraphs
from gsr_train.retrievers.cosine import segment_cosine
from gsr_train.retrievers.options import ClassicRun
from gsr_train.retrievers.pcst import pcst_scores
from gsr_train.retrievers.ppr import ppr_keep
from gsr_train.retrievers.segment_ranks import group_rank, segment_rank  # noqa: F401  (segment_rank re-exported)

log = logging.getLogger(__name__)

METHODS = ("triplets", "paths", "pcst")
TIE = 1e-3  # weight of the raw similarity used to break prize ties


DEFAULTS: dict[str, Any] = {k: v for k, v in defaults_of(ClassicRun).items() if k != "method"}


def merge_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """DEFAULTS updated by ``options`` (one level of nesting); unknown keys are an error."""
    out = copy.deepcopy(DEFAULTS)
    for group, values in (options or {}).items():
        if group == "method":
            continue
        if group not in out:
            raise ValueError(f"unknown classic option group {group!r} (known: {sorted(out)})")
        unknown = set(values or {}) - set(out[group])
        if unknown:
            raise ValueError(f"unknown classic.{group} options {sorted(unknown)} (known: {sorted(out[group])})")
        out[group].update(values or {})
    return out


# --------------------------------------------------------------------------- ranks and prizes


def similarities(
    split: SplitGraphs, question_emb: torch.Tensor, emb
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(node_sim [sum N], node_has_text [sum N], edge_sim [sum E])``: cosine to the question."""
    node_sim = segment_cosine(question_emb, split.ent_ptr, split.entity_ids, emb.entity)
    has_text = emb.entity_has_text[split.entity_ids].bool()
    edge_sim = segment_cosine(question_emb, split.edge_ptr, split.edge_rel, emb.relation)
    return torch.where(has_text, node_sim, torch.zeros_like(node_sim)), has_text, edge_sim


def rank_prizes(values: torch.Tensor, ptr: torch.Tensor, k: int, eligible: torch.Tensor | None = None) -> torch.Tensor:
    """``max(0, k - rank)`` within each segment (OKGQA); ineligible items get 0."""
    vals = values if eligible is None else torch.where(eligible, values, torch.full_like(values, -math.inf))
    prize = (int(k) - segment_rank(vals, ptr)).clamp(min=0).float()
    return prize if eligible is None else prize * eligible


def split_edge_prizes(split: SplitGraphs, edge_sim: torch.Tensor, k: int, c: float = 0.01) -> torch.Tensor:
    """G-Retriever edge prizes: the j-th best distinct relation similarity (j < k) shares
    ``k - j`` among its edges, capped to fall by a factor ``1 - c`` from one rank to the next."""
    num_e = edge_sim.numel()
    if num_e == 0 or k < 1:
        return torch.zeros(num_e)
    q = split.edge_question()
    num_rel = int(split.edge_rel.max()) + 1
    gkey, ginv, gcount = torch.unique(q * num_rel + split.edge_rel, return_inverse=True, return_counts=True)
    gq = gkey // num_rel
    gsim = scatter(edge_sim.float(), ginv, 0, dim_size=gkey.numel(), reduce="max")
    grank = group_rank(gsim, gq, len(split))
    top = grank < k
    a = torch.full((len(split), k), math.inf, dtype=torch.float64)
    a[gq[top], grank[top]] = (k - grank[top]).double() / gcount[top].double()
    decay = (1.0 - c) ** torch.arange(k, dtype=torch.float64)
    capped = torch.minimum(torch.cummin(a / decay, dim=1).values, torch.tensor(k * (1.0 - c), dtype=torch.float64))
    v = capped * decay
    gprize = torch.zeros(gkey.numel(), dtype=torch.float64)
    gprize[top] = v[gq[top], grank[top]]
    return gprize[ginv].float()


def edge_prizes(split: SplitGraphs, edge_sim: torch.Tensor, k: int, kind: str) -> torch.Tensor:
    if kind == "rank":
        return rank_prizes(edge_sim, split.edge_ptr, k)
    if kind == "split":
        return split_edge_prizes(split, edge_sim, k)
    raise ValueError(f"edge_prize must be 'rank' or 'split', got {kind!r}")


# --------------------------------------------------------------------------- methods


def triplet_scores(split: SplitGraphs, node_prize, edge_prize, node_sim, edge_sim) -> torch.Tensor:
    """Total prize of head, relation and tail (+ similarity tie-break)."""
    off = split.ent_ptr[:-1][split.edge_question()]
    h, t = split.edge_index[0] + off, split.edge_index[1] + off
    return (node_prize[h] + edge_prize + node_prize[t]) + TIE * (node_sim[h] + edge_sim + node_sim[t])


def _undirected_csr(split: SplitGraphs):
    q = split.edge_question()
    off = split.ent_ptr[:-1][q]
    e = torch.arange(q.numel())
    src = torch.cat([split.edge_index[0] + off, split.edge_index[1] + off])
    dst = torch.cat([split.edge_index[1] + off, split.edge_index[0] + off])
    eid = torch.cat([e, e])
    order = torch.argsort(src, stable=True)
    ptr = torch.zeros(int(split.ent_ptr[-1]) + 1, dtype=torch.long)
    ptr[1:] = torch.bincount(src, minlength=int(split.ent_ptr[-1])).cumsum(0)
    return ptr, dst[order], eid[order]


def path_scores(
    split: SplitGraphs,
    node_value: torch.Tensor,
    edge_value: torch.Tensor,
    start: torch.Tensor,
    max_len: int = 3,
    beam: int = 20,
    max_paths: int = 50,
    chunk_questions: int = 16,
) -> torch.Tensor:
    """Best-first prize-cost paths (see the module docstring); ``node_value`` / ``edge_value``
    are prizes (edge cost already subtracted), ``start`` marks start entities (``[sum N]``)."""
    num_e = int(split.edge_ptr[-1]) if len(split) else 0
    scores = torch.full((num_e,), -math.inf)
    if num_e == 0:
        return scores
    ptr, nbr, nbr_edge = _undirected_csr(split)
    node_q = torch.repeat_interleave(torch.arange(len(split)), split.num_entities)
    num_q = len(split)
    for q0 in range(0, num_q, chunk_questions):
        q1 = min(q0 + chunk_questions, num_q)
        n0, n1 = int(split.ent_ptr[q0]), int(split.ent_ptr[q1])
        nodes = (start[n0:n1].nonzero().flatten() + n0).unsqueeze(1)
        edges = torch.zeros(nodes.shape[0], 0, dtype=torch.long)
        score = node_value[nodes[:, 0]].double()
        found_q, found_s, found_e = [], [], []
        for _ in range(int(max_len)):
            if nodes.shape[0] == 0:
                break
            last = nodes[:, -1]
            cnt = ptr[last + 1] - ptr[last]
            rep = torch.repeat_interleave(torch.arange(nodes.shape[0]), cnt)
            pos = ptr[last][rep] + torch.arange(rep.numel()) - (cnt.cumsum(0) - cnt)[rep]
            nxt, via = nbr[pos], nbr_edge[pos]
            ok = ~(nodes[rep] == nxt.unsqueeze(1)).any(1)
            rep, nxt, via = rep[ok], nxt[ok], via[ok]
            new_score = score[rep] + edge_value[via].double() + node_value[nxt].double()
            qq = node_q[nxt] - q0
            keep = group_rank(new_score, qq, q1 - q0) < int(beam)
            rep, nxt, via, new_score = rep[keep], nxt[keep], via[keep], new_score[keep]
            nodes = torch.cat([nodes[rep], nxt.unsqueeze(1)], 1)
            edges = torch.cat([edges[rep], via.unsqueeze(1)], 1)
            score = new_score
            found_q.append(qq[keep])
            found_s.append(score)
            found_e.append(torch.nn.functional.pad(edges, (0, int(max_len) - edges.shape[1]), value=-1))
        if not found_q:
            continue
        fq, fs, fe = torch.cat(found_q), torch.cat(found_s), torch.cat(found_e)
        prank = group_rank(fs, fq, q1 - q0)
        kept = prank < int(max_paths)
        fe, prank = fe[kept], prank[kept]
        ordinal = (prank.unsqueeze(1) * int(max_len) + torch.arange(int(max_len))).flatten()
        flat = fe.flatten()
        real = flat >= 0
        hit = flat[real]  # an edge on several paths keeps its first ordinal
        scores[hit] = -scatter(ordinal[real].double(), hit, 0, dim_size=num_e, reduce="min")[hit].float()
    return scores


def classic_scores(
    split: SplitGraphs,
    question_emb: torch.Tensor,
    emb,
    method: str,
    options: Mapping[str, Any] | None = None,
    max_edges: int = DEFAULT_CHUNK_EDGES,
) -> torch.Tensor:
    """``FloatTensor[sum E]`` scores of a classic retriever (``-inf`` = not retrieved).

    Every question is scored on its own graph, so a big split is scored in runs of at most
    ``max_edges`` edges (the per-edge temporaries stay bounded; same scores).
    """
    if method not in METHODS:
        raise ValueError(f"classic method must be one of {METHODS}, got {method!r}")
    opts = merge_options(options)
    if question_emb.shape[0] != len(split):
        raise ValueError(f"question_emb has {question_emb.shape[0]} rows, the split has {len(split)} questions")
    num_e = int(split.edge_ptr[-1]) if len(split) else 0
    bounds = split.chunk_bounds(max_edges) if len(split) else []
    if len(bounds) > 1:
        out = torch.empty(num_e)
        for q0, q1 in bounds:
            e0, e1 = int(split.edge_ptr[q0]), int(split.edge_ptr[q1])
            out[e0:e1] = classic_scores(
                split.slice(q0, q1), question_emb[q0:q1], emb, method, opts, max_edges=num_e + 1
            )
        return out
    if opts["ppr"]["enabled"]:
        p = opts["ppr"]
        keep = ppr_keep(split, int(p["top_nodes"]), float(p["alpha"]), int(p["iters"]))
        sub, origin = masked_split(split, keep)
        out = torch.full((num_e,), -math.inf)
        out[origin] = classic_scores(sub, question_emb, emb, method, {**opts, "ppr": {"enabled": False}})
        return out
    node_sim, has_text, edge_sim = similarities(split, question_emb, emb)
    k_n, k_e = int(opts["prizes"]["topk_nodes"]), int(opts["prizes"]["topk_edges"])
    node_prize = rank_prizes(node_sim, split.ent_ptr, k_n, has_text)
    m = opts[method]
    e_prize = edge_prizes(split, edge_sim, k_e, m["edge_prize"])
    if method == "triplets":
        return triplet_scores(split, node_prize, e_prize, node_sim, edge_sim)
    if method == "paths":
        node_value = node_prize + TIE * node_sim
        edge_value = e_prize + TIE * edge_sim - float(m["edge_cost"])
        start = torch.zeros(node_sim.numel(), dtype=torch.bool)
        if m["starts"] in ("prize", "both"):
            start |= (
                segment_rank(torch.where(has_text, node_value, torch.full_like(node_value, -math.inf)), split.ent_ptr)
                < int(m["num_starts"])
            ) & has_text
        if m["starts"] in ("topic", "both"):
            start |= split.topic_mask
        if m["starts"] not in ("prize", "topic", "both"):
            raise ValueError(f"classic.paths.starts must be prize | topic | both, got {m['starts']!r}")
        return path_scores(
            split,
            node_value,
            edge_value,
            start,
            int(m["max_len"]),
            int(m["beam"]),
            int(m["max_paths"]),
            int(m["chunk_questions"]),
        )

    return pcst_scores(
        split, node_prize + TIE * node_sim.clamp(min=0), e_prize, float(m["edge_cost"]), m.get("budget"), m["pruning"]
    )


def masked_split(split: SplitGraphs, keep: torch.Tensor) -> tuple[SplitGraphs, torch.Tensor]:
    """The split with only the ``keep`` edges, and the original id of every kept edge."""
    ptr = torch.zeros(len(split) + 1, dtype=torch.long)
    ptr[1:] = segment_count(keep, split.edge_ptr).cumsum(0)
    sub = split.with_edges(ptr, split.edge_index[:, keep], split.edge_rel[keep])
    return sub, keep.nonzero().flatten()
