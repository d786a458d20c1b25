"""Directional distance encoding (DDE): parameter-free structural features per entity.

SubgraphRAG's structural signal (paper sec. 3.1): start from a one-hot ``[is_topic,
not_topic]`` per entity, then propagate it by mean aggregation, ``F`` rounds along
head->tail edges and, separately, ``R`` rounds along tail->head edges, each round feeding
the next. The start vector and every round are concatenated, so an entity gets
``2 * (1 + F + R)`` channels (10 with the default 2 + 2). A triple's feature is
``[s_head || s_tail]``.

Means are over triples (a pair of entities joined by two relations counts twice) and an
entity with no incoming edge in a direction gets zeros for that round. Everything is one
`gsr_train.arrays.scatter` call per round over the edges of *all* graphs at once:
the graphs of a `gsr_train.kg.index.SplitGraphs` are already concatenated, so
shifting local ids by ``ent_ptr`` makes them one disjoint graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from gsr_train.arrays import scatter
from gsr_train.kg.index import SplitGraphs

STRUCTURES = ("dde", "topic", "none")


def dde_channels(forward_rounds: int = 2, reverse_rounds: int = 2) -> int:
    return 2 * (1 + forward_rounds + reverse_rounds)


def topic_one_hot(topic_mask: torch.Tensor) -> torch.Tensor:
    """``[N, 2]`` float: ``[is_topic, not_topic]``."""
    t = topic_mask.bool()
    return torch.stack([t, ~t], dim=1).float()


def dde(
    edge_index: torch.Tensor, topic_mask: torch.Tensor, forward_rounds: int = 2, reverse_rounds: int = 2
) -> torch.Tensor:
    """``[N, 2 * (1 + F + R)]`` DDE of every node of a (possibly batched) graph.

    ``edge_index``: ``[2, E]`` (head, tail) node ids in ``[0, N)`` where ``N`` is
    ``topic_mask.numel()``.
    """
    if forward_rounds < 0 or reverse_rounds < 0:
        raise ValueError(f"DDE rounds must be >= 0, got forward={forward_rounds}, reverse={reverse_rounds}")
    num_nodes = topic_mask.numel()
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ValueError(f"edge_index refers to nodes outside [0, {num_nodes})")
    start = topic_one_hot(topic_mask)
    # Both directions in one scatter per round: nodes [0, N) carry the forward state and
    # [N, 2N) the reverse state, with edges head -> tail and (tail + N) -> (head + N).
    head, tail = edge_index[0], edge_index[1]
    src = torch.cat([head, tail + num_nodes])
    dst = torch.cat([tail, head + num_nodes])
    state = torch.cat([start, start])
    forward, reverse = [], []
    for r in range(max(forward_rounds, reverse_rounds)):
        state = scatter(state[src], dst, dim=0, dim_size=2 * num_nodes, reduce="mean")
        if r < forward_rounds:
            forward.append(state[:num_nodes])
        if r < reverse_rounds:
            reverse.append(state[num_nodes:])
    return torch.cat([start, *forward, *reverse], dim=1)


class DDE(nn.Module):
    """`dde` as a (parameter-free) module, for use inside models."""

    def __init__(self, forward_rounds: int = 2, reverse_rounds: int = 2) -> None:
        super().__init__()
        self.forward_rounds = int(forward_rounds)
        self.reverse_rounds = int(reverse_rounds)

    @property
    def out_channels(self) -> int:
        return dde_channels(self.forward_rounds, self.reverse_rounds)

    def forward(self, edge_index: torch.Tensor, topic_mask: torch.Tensor) -> torch.Tensor:
        return dde(edge_index, topic_mask, self.forward_rounds, self.reverse_rounds)

    def extra_repr(self) -> str:
        return f"forward_rounds={self.forward_rounds}, reverse_rounds={self.reverse_rounds}"


def batched_edge_index(split: SplitGraphs) -> torch.Tensor:
    """``[2, sum E]`` edges of every graph with node ids shifted into the concatenated node range."""
    offsets = torch.repeat_interleave(split.ent_ptr[:-1], split.num_edges)
    return split.edge_index + offsets


def structure_channels(structure: str, forward_rounds: int = 2, reverse_rounds: int = 2) -> int:
    if structure == "dde":
        return dde_channels(forward_rounds, reverse_rounds)
    if structure == "topic":
        return 2
    if structure == "none":
        return 0
    raise ValueError(f"structure must be one of {STRUCTURES}, got {structure!r}")


def graph_structure(
    edge_index: torch.Tensor,
    topic_mask: torch.Tensor,
    structure: str = "dde",
    forward_rounds: int = 2,
    reverse_rounds: int = 2,
) -> torch.Tensor:
    """``[N, C]`` structural features of the nodes of one (possibly batched) graph.

    ``structure``: ``dde`` (full DDE), ``topic`` (only the topic one-hot: the paper's
    "MLP + topic entity" ablation) or ``none`` (the "MLP" ablation; zero channels).
    """
    channels = structure_channels(structure, forward_rounds, reverse_rounds)
    if structure == "dde":
        return dde(edge_index, topic_mask, forward_rounds, reverse_rounds)
    if structure == "topic":
        return topic_one_hot(topic_mask)
    return torch.zeros(topic_mask.numel(), channels)


def structure_features(
    split: SplitGraphs, structure: str = "dde", forward_rounds: int = 2, reverse_rounds: int = 2
) -> torch.Tensor:
    """``[sum N, C]`` `graph_structure` of every local entity of a split (all graphs at once)."""
    return graph_structure(batched_edge_index(split), split.topic_mask, structure, forward_rounds, reverse_rounds)


@dataclass
class NodeFeatures:
    """Structural features stored once per *distinct* row: ``table[rows[n]]`` is node ``n``'s.

    DDE vectors repeat a lot (about 5% of the nodes of a WebQSP batch have a distinct one),
    so the scorer projects each distinct row once instead of each node.
    """

    table: torch.Tensor  # [D, C]
    rows: torch.Tensor  # [sum N] int32 (long beyond 2**31 distinct rows)

    @classmethod
    def from_dense(cls, features: torch.Tensor) -> NodeFeatures:
        if features.shape[1] == 0 or features.shape[0] == 0:
            return cls(torch.zeros(1, features.shape[1]), torch.zeros(features.shape[0], dtype=torch.long))
        # exact dedup on the rows' bytes (numpy sorts fixed-size byte strings far faster
        # than torch.unique(dim=0), which compares row by row)
        arr = np.ascontiguousarray(features.float().numpy())
        keys = arr.view(np.dtype((np.void, arr.shape[1] * arr.itemsize))).ravel()
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        return cls(features[torch.from_numpy(first)].float(), torch.from_numpy(inverse.reshape(-1)).long())

    def dense(self) -> torch.Tensor:
        return self.table[self.rows]


def node_features(
    split: SplitGraphs,
    structure: str = "dde",
    forward_rounds: int = 2,
    reverse_rounds: int = 2,
    max_edges: int = 2_000_000,
) -> NodeFeatures:
    """`structure_features` of a split, stored as distinct rows (`NodeFeatures`).

    Graphs are disjoint, so the features are computed over runs of whole graphs of at most
    ``max_edges`` edges and only each run's distinct rows are kept: peak memory follows the
    run, not the split (a full CWQ split has ~100M edges). The result is the same as one
    pass over the whole split: the table is the sorted distinct rows of all runs.
    """
    tables, rows = [], []
    for _q0, _q1, part in split.chunks(max_edges):
        feats = NodeFeatures.from_dense(structure_features(part, structure, forward_rounds, reverse_rounds))
        tables.append(feats.table)
        rows.append(feats.rows)
    if not tables:
        tables, rows = [torch.zeros(1, structure_channels(structure, forward_rounds, reverse_rounds))], []
    if len(tables) == 1:
        return NodeFeatures(
            tables[0], rows[0].to(_row_dtype(tables[0].shape[0])) if rows else torch.zeros(0, dtype=torch.int32)
        )
    merged = NodeFeatures.from_dense(torch.cat(tables))
    dtype = _row_dtype(merged.table.shape[0])
    offsets = np.cumsum([0] + [t.shape[0] for t in tables[:-1]])
    out = torch.empty(sum(r.numel() for r in rows), dtype=dtype)
    at = 0
    for off, r in zip(offsets, rows):
        out[at : at + r.numel()] = merged.rows[r + int(off)]
        at += r.numel()
    return NodeFeatures(merged.table, out)


def _row_dtype(num_rows: int) -> torch.dtype:
    return torch.int32 if num_rows < 2**31 else torch.long
