"""Chain execution on a hand-made graph: both edge directions, walks, paths, next relations."""

from __future__ import annotations

import gzip
import json

import pytest
import torch

from gsr_train.kg.execution import ChainExecutor, verbalize_path
from gsr_train.kg.index import build_index

#   A -r1-> B -r2-> D        C -r1-> A  (reverse for a walk from A)
#   E -r2-> C                B -r3-> F  (r3 only from B)
GRAPH = [["A", "r1", "B"], ["C", "r1", "A"], ["B", "r2", "D"], ["E", "r2", "C"], ["B", "r3", "F"], ["X", "r2", "Y"]]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kg")
    rows = [
        {
            "id": "q0",
            "question": "q",
            "answer": ["D"],
            "q_entity": ["A"],
            "a_entity": ["D"],
            "graph": GRAPH,
            "choices": [],
        },
        {
            "id": "q1",
            "question": "q",
            "answer": ["B"],
            "q_entity": ["B"],
            "a_entity": ["B"],
            "graph": [["B", "r3", "F"]],
            "choices": [],
        },
    ]
    with gzip.open(folder / "test.jsonl.gz", "wt") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return build_index(folder, splits=("test",))


def names(index, split, q, mask):
    n0 = int(split.ent_ptr[q])
    return {index.entities[int(split.entity_ids[n0 + i])] for i in mask.nonzero().flatten().tolist()}


def rel(index, *rs):
    lookup = index.relation_lookup()
    return tuple(lookup[r] for r in rs)


def test_both_directions(index):
    split = index["test"]
    ex = ChainExecutor(split)
    assert names(index, split, 0, ex.frontier(0, rel(index, "r1"))) == {"B", "C"}
    assert names(index, split, 0, ex.frontier(0, rel(index, "r1", "r2"))) == {"D", "E"}
    fwd = ChainExecutor(split, direction="forward")
    assert names(index, split, 0, fwd.frontier(0, rel(index, "r1"))) == {"B"}
    assert names(index, split, 0, fwd.frontier(0, rel(index, "r1", "r2"))) == {"D"}
    assert ex.is_valid(0, rel(index, "r1", "r3")) and not fwd.is_valid(0, rel(index, "r2"))
    assert not ex.is_valid(0, rel(index, "r2")) and not ex.is_valid(0, ())
    # the X -r2-> Y edge is not reachable from A: never part of a walk
    walk = ex.execute(0, rel(index, "r1", "r2"))
    used = {tuple(t) for t in (index.triple_strings("test", 0)[e] for e in walk.edges().tolist())}
    assert used == {("A", "r1", "B"), ("C", "r1", "A"), ("B", "r2", "D"), ("E", "r2", "C")}


def test_walk_prunes_dead_ends_and_verbalises(index):
    split = index["test"]
    ex = ChainExecutor(split)
    walk = ex.execute(0, rel(index, "r1", "r3"))  # only the A -> B branch continues with r3
    assert walk.valid and names(
        index, split, 0, torch.zeros(split.graph(0).num_entities, dtype=torch.bool).index_fill_(0, walk.ends, True)
    ) == {"F"}
    used = {tuple(index.triple_strings("test", 0)[e]) for e in walk.edges().tolist()}
    assert used == {("A", "r1", "B"), ("B", "r3", "F")}
    paths = [
        verbalize_path(p, w, split, index.entities, index.relations)
        for w in [ex.execute(0, rel(index, "r1", "r2"))]
        for p in ex.paths(w)
    ]
    assert sorted(paths) == ["A -> r1 -> B -> r2 -> D", "A <- r1 <- C <- r2 <- E"]
    assert ex.global_edges(walk).min() >= int(split.edge_ptr[0])


def test_allowed_relations(index):
    split = index["test"]
    ex = ChainExecutor(split)
    r1, r2, r3 = rel(index, "r1", "r2", "r3")
    assert ex.allowed_relations(0, ()).tolist() == [r1]
    assert set(ex.allowed_relations(0, (r1,)).tolist()) == {r1, r2, r3}
    assert ex.allowed_relations(0, (r2,)).numel() == 0
    assert ex.allowed_relations(1, ()).tolist() == [r3]  # second question: its own graph only


def test_hop_distances_follow_the_direction_rule(index):
    split = index["test"]
    ex, fwd = ChainExecutor(split), ChainExecutor(split, direction="forward")
    n0 = int(split.ent_ptr[0])

    def by_name(e):
        return {index.entities[int(split.entity_ids[n0 + i])]: int(d) for i, d in enumerate(e.distances(0).tolist())}

    assert by_name(ex) == {"A": 0, "B": 1, "C": 1, "D": 2, "E": 2, "F": 2, "X": -1, "Y": -1}
    assert by_name(fwd) == {"A": 0, "B": 1, "C": -1, "D": 2, "E": -1, "F": 2, "X": -1, "Y": -1}
    assert ex.distances(0) is ex.distances(0)  # memoised per question
    ex.clear_cache()
    assert not ex._distances


def test_shortest_allows_only_hops_away_from_the_topic(index):
    split = index["test"]
    ex = ChainExecutor(split)
    r1, r2, r3 = rel(index, "r1", "r2", "r3")
    assert ex.allowed_relations(0, (), shortest=True).tolist() == [r1]
    # r1 again only leads back to A (distance 0): a loop, not a shortest chain
    assert set(ex.allowed_relations(0, (r1,)).tolist()) == {r1, r2, r3}
    assert set(ex.allowed_relations(0, (r1,), shortest=True).tolist()) == {r2, r3}
    # a frontier that is back at the topic cannot continue as a shortest chain at all
    assert ex.allowed_relations(0, (r1, r1), shortest=True).numel() == 0
    fwd = ChainExecutor(split, direction="forward")
    assert set(fwd.allowed_relations(0, (r1,), shortest=True).tolist()) == {r2, r3}
    assert fwd.allowed_relations(0, (r1, r2), shortest=True).numel() == 0  # D has no way on
