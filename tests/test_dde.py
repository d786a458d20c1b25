"""DDE values against a small graph computed by hand, batching, and the feature variants."""

from __future__ import annotations

import pytest
import torch

from gsr_train.features.structure import (
    DDE,
    NodeFeatures,
    dde,
    dde_channels,
    node_features,
    structure_channels,
    structure_features,
)
from gsr_train.kg.index import SplitGraphs

# Nodes 0..3, topic = 0. Edges (head -> tail): 0->1, 1->2, 0->2, 3->0.
EDGES = torch.tensor([[0, 1, 0, 3], [1, 2, 2, 0]])
TOPIC = torch.tensor([True, False, False, False])
# By hand: s0 = one-hot [is_topic, not_topic]; forward rounds average the in-neighbours
# (heads of edges ending at the node), reverse rounds the out-neighbours.
S0 = [[1, 0], [0, 1], [0, 1], [0, 1]]
F1 = [[0, 1], [1, 0], [0.5, 0.5], [0, 0]]  # node 0 <- 3; 1 <- 0; 2 <- {1, 0}; 3 <- none
F2 = [[0, 0], [0, 1], [0.5, 0.5], [0, 0]]  # same neighbours, over F1
R1 = [[0, 1], [0, 1], [0, 0], [1, 0]]  # node 0 -> {1, 2}; 1 -> 2; 2 -> none; 3 -> 0
R2 = [[0, 0.5], [0, 0], [0, 0], [0, 1]]  # same neighbours, over R1
EXPECTED = torch.tensor([s0 + f1 + f2 + r1 + r2 for s0, f1, f2, r1, r2 in zip(S0, F1, F2, R1, R2)], dtype=torch.float)


def test_dde_matches_hand_computation():
    out = dde(EDGES, TOPIC, 2, 2)
    assert out.shape == (4, dde_channels(2, 2)) == (4, 10)
    torch.testing.assert_close(out, EXPECTED)
    torch.testing.assert_close(DDE(2, 2)(EDGES, TOPIC), EXPECTED)


def test_round_counts_and_order():
    torch.testing.assert_close(dde(EDGES, TOPIC, 1, 0), EXPECTED[:, :4])
    only_reverse = dde(EDGES, TOPIC, 0, 2)
    torch.testing.assert_close(only_reverse, torch.cat([EXPECTED[:, :2], EXPECTED[:, 6:]], dim=1))
    assert dde(EDGES, TOPIC, 3, 1).shape == (4, 10)


def test_parallel_relations_count_per_triple():
    # a second relation 0 -> 2: node 2's forward mean is over three triples now
    edges = torch.cat([EDGES, torch.tensor([[0], [2]])], dim=1)
    out = dde(edges, TOPIC, 1, 0)
    torch.testing.assert_close(out[2, 2:4], torch.tensor([2 / 3, 1 / 3]))


def _two_graph_split() -> SplitGraphs:
    """The hand graph twice (second copy with the topic on node 1 and one edge fewer)."""
    return SplitGraphs(
        ids=["a", "b"],
        questions=["qa", "qb"],
        answers=[["x"], ["y"]],
        ent_ptr=torch.tensor([0, 4, 8]),
        entity_ids=torch.arange(8),
        topic_mask=torch.tensor([True, False, False, False, False, True, False, False]),
        answer_mask=torch.zeros(8, dtype=torch.bool),
        edge_ptr=torch.tensor([0, 4, 7]),
        edge_index=torch.tensor([[0, 1, 0, 3, 0, 1, 0], [1, 2, 2, 0, 1, 2, 2]]),
        edge_rel=torch.zeros(7, dtype=torch.long),
    )


def test_batched_over_graphs_equals_one_graph_at_a_time():
    split = _two_graph_split()
    batched = structure_features(split, "dde")
    for i in range(len(split)):
        g = split.graph(i)
        n0, n1 = int(split.ent_ptr[i]), int(split.ent_ptr[i + 1])
        torch.testing.assert_close(batched[n0:n1], dde(g.edge_index, g.topic_mask))
    torch.testing.assert_close(batched[:4], EXPECTED)


def test_feature_variants_and_dedup():
    split = _two_graph_split()
    assert structure_features(split, "topic").tolist()[:2] == [[1.0, 0.0], [0.0, 1.0]]
    assert structure_features(split, "none").shape == (8, 0)
    assert [structure_channels(s) for s in ("dde", "topic", "none")] == [10, 2, 0]
    with pytest.raises(ValueError, match="structure must be one of"):
        structure_features(split, "gnn")
    dense = structure_features(split, "dde")
    feats = node_features(split, "dde")
    assert isinstance(feats, NodeFeatures) and feats.rows.shape == (8,)
    assert feats.table.shape[0] == torch.unique(dense, dim=0).shape[0]
    torch.testing.assert_close(feats.dense(), dense)
    twice = node_features(split.subset([0, 0]), "dde")  # the same graph twice: 4 distinct rows
    assert twice.table.shape[0] == 4 and twice.rows.tolist() == twice.rows[:4].tolist() * 2
    torch.testing.assert_close(twice.dense()[:4], EXPECTED)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="outside"):
        dde(torch.tensor([[0], [5]]), TOPIC)
    with pytest.raises(ValueError, match=r"\[2, E\]"):
        dde(torch.tensor([0, 1]), TOPIC)
