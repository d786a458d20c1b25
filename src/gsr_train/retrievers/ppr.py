"""Personalised PageRank pruning: an optional pre-step for the classic retrievers.

OKGQA prunes each 2-hop question graph with personalised PageRank from the question's
entities before retrieval (papers/okgqa.txt, sec. 3.1, app. A.5). Here the restart vector is
uniform over the question's topic entities (all entities when it has none), the walk
follows edges in both directions (weight 1 per edge), dangling mass returns to the
restart vector, and the ``top_nodes`` entities of each question with the highest PPR are
kept together with the edges between them.

All questions are iterated at once: the split's graphs form one block-diagonal graph, so
an iteration is one `gsr_train.arrays.scatter` over the edges.
"""

from __future__ import annotations

import torch

from gsr_train.arrays import scatter
from gsr_train.kg.index import SplitGraphs
from gsr_train.retrievers.segment_ranks import segment_rank


def ppr_scores(split: SplitGraphs, alpha: float = 0.15, iters: int = 30) -> torch.Tensor:
    """``[sum N]`` personalised PageRank of every local entity (each question sums to 1)."""
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"ppr alpha (restart probability) must be in (0, 1], got {alpha}")
    total_n = int(split.ent_ptr[-1])
    node_q = torch.repeat_interleave(torch.arange(len(split)), split.num_entities)
    topic = split.topic_mask.double()
    per_q = scatter(topic, node_q, 0, dim_size=len(split), reduce="sum")
    restart = torch.where(
        per_q[node_q] > 0, topic / per_q[node_q].clamp(min=1), 1.0 / split.num_entities[node_q].clamp(min=1).double()
    )
    q = split.edge_question()
    off = split.ent_ptr[:-1][q]
    src = torch.cat([split.edge_index[0] + off, split.edge_index[1] + off])
    dst = torch.cat([split.edge_index[1] + off, split.edge_index[0] + off])
    deg = torch.bincount(src, minlength=total_n).double()
    dangling = deg == 0
    p = restart.clone()
    for _ in range(int(iters)):
        moved = scatter((p / deg.clamp(min=1))[src], dst, 0, dim_size=total_n, reduce="sum")
        lost = scatter(p * dangling, node_q, 0, dim_size=len(split), reduce="sum")
        p = (1 - alpha) * (moved + lost[node_q] * restart) + alpha * restart
    return p.float()


def ppr_keep(split: SplitGraphs, top_nodes: int = 200, alpha: float = 0.15, iters: int = 30) -> torch.Tensor:
    """``[sum E]`` bool: edges whose both ends are among the ``top_nodes`` highest-PPR entities."""
    if top_nodes < 1:
        raise ValueError(f"ppr top_nodes must be >= 1, got {top_nodes}")
    rank = segment_rank(ppr_scores(split, alpha, iters), split.ent_ptr)
    kept = rank < int(top_nodes)
    off = split.ent_ptr[:-1][split.edge_question()]
    return kept[split.edge_index[0] + off] & kept[split.edge_index[1] + off]


def ppr_edge_scores(split: SplitGraphs, alpha: float = 0.15, iters: int = 30) -> torch.Tensor:
    """``[sum E]`` scores that rank edges the way `ppr_keep` grows: an edge's rank is the
    PPR rank of its lower-ranked end, so the top edges at any cut are exactly the edges among the
    highest-PPR entities (the OKGQA PPR subgraph of that size); ties go to the higher PPR mass."""
    p = ppr_scores(split, alpha, iters).double()
    rank = segment_rank(p.float(), split.ent_ptr).double()
    off = split.ent_ptr[:-1][split.edge_question()]
    h, t = split.edge_index[0] + off, split.edge_index[1] + off
    worst = torch.maximum(rank[h], rank[t])
    return (-worst + 0.25 * (p[h] + p[t])).float()  # PPR mass sums to 1 per question: the tie-break is < 1
