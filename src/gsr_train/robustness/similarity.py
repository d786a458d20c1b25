"""How far a perturbed KG is from the original: SC2D, SD2 (structure) and ATS (semantics).

Definitions from OKGQA (papers/okgqa.txt, app. A.7, after Raman et al. 2020), applied to
each question's graph (every question's graph is a KG of its own) and averaged over the
questions:

* for each relation ``r`` of a graph, ``G^r`` is the subgraph of its ``r`` edges; ``c^r`` the
  vector of local clustering coefficients of every entity in ``G^r`` (undirected, simple:
  parallel edges merged, self-loops dropped), ``d^r`` the vector of entity degrees in
  ``G^r`` (edges counted, in + out);
* ``c_o = mean_{r in R} c^r`` over the original graph's relations, ``c_p`` over the
  perturbed graph's relations ``R'`` (a zero vector when ``R'`` is empty); same for ``d``;
* ``SC2D = 1 - ||c_o - c_p|| / (||c_o - c_p|| + 1)``, ``SD2`` likewise with ``d``; both 1
  for an unchanged graph;
* ``ATS`` = mean of ``s_G(h, r, t)`` over the perturbed graph's triples, ``s_G`` a link
  predictor trained on the original graph (`gsr_train.robustness.kge`).

Triangles of all ``(question, relation)`` subgraphs are counted at once with the
degree-ordered "forward" algorithm: every edge is oriented from its lower- to its
higher-ranked end (rank = degree, then id); a triangle is found exactly once as a pair of
out-edges ``u -> v``, ``u -> w`` of its lowest-ranked vertex plus the edge ``v - w``, looked
up by binary search. The wedge count is bounded by ``O(E^1.5)`` and processed in chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gsr_train.arrays import scatter
from gsr_train.kg.index import SplitGraphs

WEDGE_CHUNK = 1 << 22


def triangle_counts(a: torch.Tensor, b: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Triangles through every vertex of a simple undirected graph given as unique pairs ``a < b``."""
    tri = torch.zeros(num_nodes, dtype=torch.long)
    m = a.numel()
    if m < 3:
        return tri
    deg = torch.bincount(a, minlength=num_nodes) + torch.bincount(b, minlength=num_nodes)
    rank = deg * num_nodes + torch.arange(num_nodes)
    lower = rank[a] < rank[b]
    src = torch.where(lower, a, b)
    dst = torch.where(lower, b, a)
    order = torch.argsort(src * num_nodes + dst)
    src, dst = src[order], dst[order]
    ptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    ptr[1:] = torch.bincount(src, minlength=num_nodes).cumsum(0)
    keys = torch.sort(torch.minimum(a, b) * num_nodes + torch.maximum(a, b)).values
    later = ptr[src + 1] - torch.arange(m) - 1  # out-edges of the same source after this one
    csum = later.cumsum(0)
    start = 0
    while start < m:  # chunks of edges with at most WEDGE_CHUNK wedges (at least one edge)
        base = int(csum[start - 1]) if start else 0
        end = int(torch.searchsorted(csum, base + WEDGE_CHUNK, right=True))
        end = min(max(end, start + 1), m)
        cnt = later[start:end]
        total = int(cnt.sum())
        if total:
            i = torch.repeat_interleave(torch.arange(start, end), cnt)
            j = i + 1 + torch.arange(total) - torch.repeat_interleave(cnt.cumsum(0) - cnt, cnt)
            v, w = dst[i], dst[j]
            k = torch.minimum(v, w) * num_nodes + torch.maximum(v, w)
            pos = torch.searchsorted(keys, k).clamp(max=m - 1)
            found = keys[pos] == k
            tri += torch.bincount(torch.cat([src[i][found], v[found], w[found]]), minlength=num_nodes)
        start = end
    return tri


def relation_profiles(split: SplitGraphs) -> tuple[torch.Tensor, torch.Tensor]:
    """``(c_mean, d_mean)``: per local entity (``[sum N]``), the mean over the question's
    relations of its clustering coefficient and of its degree in each relation subgraph."""
    total_n = int(split.ent_ptr[-1])
    c_sum = torch.zeros(total_n, dtype=torch.float64)
    d_sum = torch.zeros(total_n, dtype=torch.float64)
    num_rel = torch.zeros(len(split), dtype=torch.long)
    if split.edge_rel.numel():
        q = split.edge_question()
        off = split.ent_ptr[:-1][q]
        h, t, r = split.edge_index[0] + off, split.edge_index[1] + off, split.edge_rel
        # sum over relations of the degree in G^r is the plain degree (every edge has one relation)
        d_sum += torch.bincount(h, minlength=total_n).double() + torch.bincount(t, minlength=total_n).double()
        qr = torch.unique(q * (int(r.max()) + 1) + r)
        num_rel = torch.bincount(qr // (int(r.max()) + 1), minlength=len(split))
        # one vertex per (relation, entity): the relation subgraphs become disjoint components
        gkey, ginv = torch.unique(torch.cat([r * total_n + h, r * total_n + t]), return_inverse=True)
        gh, gt = ginv[: h.numel()], ginv[h.numel() :]
        keep = gh != gt
        n = gkey.numel()
        pair = torch.unique(torch.minimum(gh, gt)[keep] * n + torch.maximum(gh, gt)[keep])
        pa, pb = pair // n, pair % n
        deg = torch.bincount(pa, minlength=n) + torch.bincount(pb, minlength=n)
        tri = triangle_counts(pa, pb, n)
        dd = deg.double()
        c = torch.where(deg > 1, 2.0 * tri.double() / (dd * (dd - 1)).clamp(min=1), torch.zeros_like(dd))
        c_sum = scatter(c, gkey % total_n, 0, dim_size=total_n, reduce="sum")  # summed over relations
    node_q = torch.repeat_interleave(torch.arange(len(split)), split.num_entities)
    denom = num_rel[node_q].double()
    scale = torch.where(denom > 0, 1.0 / denom.clamp(min=1), torch.zeros_like(denom))
    return c_sum * scale, d_sum * scale


def _similarity(a: torch.Tensor, b: torch.Tensor, split: SplitGraphs) -> torch.Tensor:
    node_q = torch.repeat_interleave(torch.arange(len(split)), split.num_entities)
    sq = scatter((a - b) ** 2, node_q, 0, dim_size=len(split), reduce="sum")
    dist = sq.sqrt()
    return 1.0 - dist / (dist + 1.0)


@dataclass
class Similarity:
    sc2d: float
    sd2: float
    ats: float | None
    per_question_sc2d: torch.Tensor
    per_question_sd2: torch.Tensor

    def to_dict(self) -> dict:
        return {"sc2d": self.sc2d, "sd2": self.sd2, "ats": self.ats}


def structural_similarity(original: SplitGraphs, perturbed: SplitGraphs) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-question ``(SC2D, SD2)`` of two splits with the same questions and entities."""
    if len(original) != len(perturbed) or not torch.equal(original.ent_ptr, perturbed.ent_ptr):
        raise ValueError("SC2D / SD2 compare two versions of the same questions and entities")
    c_o, d_o = relation_profiles(original)
    c_p, d_p = relation_profiles(perturbed)
    return _similarity(c_o, c_p, original), _similarity(d_o, d_p, original)


def ats(scorer, split: SplitGraphs) -> float:
    """Mean plausibility of the split's triples under ``scorer`` (0 for a graph without edges,
    as OKGQA reports for deleting every edge)."""
    if split.edge_rel.numel() == 0:
        return 0.0
    trip = split.global_edges()
    return float(scorer.probability(trip[:, 0], trip[:, 1], trip[:, 2]).double().mean())


def similarity(original: SplitGraphs, perturbed: SplitGraphs, scorer=None) -> Similarity:
    sc, sd = structural_similarity(original, perturbed)
    return Similarity(
        float(sc.mean()) if len(sc) else 1.0,
        float(sd.mean()) if len(sd) else 1.0,
        ats(scorer, perturbed) if scorer is not None else None,
        sc,
        sd,
    )
