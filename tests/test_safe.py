"""SAFE: the distance join respects delta and equals an exhaustive join; end to end on a tiny KG."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from gsr_train.kg.schema import SchemaGraph, type_distances
from gsr_train.patterns.pattern import path_pattern
from gsr_train.retrievers.options import SAFEConfig
from gsr_train.retrievers.safe import Candidate, _node_type, distance_join, instantiate, safe_retrieve
from tests.patterns_helpers import tiny_index


def _random_schema(rng: random.Random, num_types=7, num_edges=12) -> SchemaGraph:
    head = torch.tensor([rng.randrange(num_types) for _ in range(num_edges)])
    tail = torch.tensor([rng.randrange(num_types) for _ in range(num_edges)])
    rel = torch.arange(num_edges)
    ones = torch.ones(num_edges, dtype=torch.long)
    return SchemaGraph(
        [f"t{i}" for i in range(num_types)],
        head,
        rel,
        tail,
        ones,
        ones.double(),
        torch.ones(num_types, dtype=torch.long),
        type_distances(num_types, head, tail, 3),
        3,
    )


def _shared_ok(p, combo, sg, delta) -> bool:
    given: dict[int, list[int]] = {}
    for e, c in zip(p.edges, combo):
        given.setdefault(e.head, []).append(_node_type(c, sg, True))
        given.setdefault(e.tail, []).append(_node_type(c, sg, False))
    return all(int(sg.distance[a, b]) <= delta for ts in given.values() for a, b in itertools.combinations(ts, 2))


@pytest.mark.parametrize("hops", [2, 3])
def test_join_respects_delta_and_is_exhaustive(hops):
    rng = random.Random(hops)
    grew = 0
    for _ in range(20):
        sg = _random_schema(rng)
        p = path_pattern("x", [f"r{i}" for i in range(hops)])
        cands = [
            [Candidate(rng.randrange(len(sg)), rng.random() < 0.5, rng.random()) for _ in range(3)] for _ in range(hops)
        ]
        counts = []
        for delta in (0, 1, 2):
            got = distance_join(p, cands, sg, delta, k_qg=10**6)
            want = sorted(
                (sum(c.distance for c in combo), combo)
                for combo in itertools.product(*cands)
                if _shared_ok(p, combo, sg, delta)
            )
            assert [a.distance for a in got] == pytest.approx([d for d, _ in want])
            for a in got:
                assert _shared_ok(p, a.edges, sg, delta)
            top = distance_join(p, cands, sg, delta, k_qg=2)
            assert [a.distance for a in top] == pytest.approx([d for d, _ in want][:2])
            counts.append(len(got))
        assert counts == sorted(counts)
        grew += counts[0] < counts[2]
    assert grew >= 5, "a larger delta should admit more joins in most random cases"


def test_instantiate_bridges_type_gaps():
    # types 0-1-2 in a chain; edge A gives the shared node type 0, edge B type 2: 2 hops apart
    head, tail = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 3])
    ones = torch.ones(3, dtype=torch.long)
    sg = SchemaGraph(
        ["a", "b", "c", "d"],
        head,
        torch.tensor([0, 1, 2]),
        tail,
        ones,
        ones.double(),
        torch.ones(4, dtype=torch.long),
        type_distances(4, head, tail, 3),
        3,
    )
    p = path_pattern("x", ["r0", "r2"])
    from gsr_train.retrievers.safe import Alignment

    a = Alignment((Candidate(0, True, 0.1), Candidate(2, False, 0.2)), 0.3)  # node 1 -> type a / type c
    assert int(sg.distance[0, 2]) == 2 and not _shared_ok(p, a.edges, sg, 1) and _shared_ok(p, a.edges, sg, 2)
    q = instantiate(p, a, sg, ["r0", "r1", "r2"])
    assert len(q.edges) == 4 and len(q.nodes) == 5  # two bridge edges of unknown relation
    assert sum(e.relation is None for e in q.edges) == 2
    assert q.meta["join_distance"] == pytest.approx(0.3)


def test_safe_end_to_end_on_tiny_kg(tmp_path):
    index, emb = tiny_index(tmp_path)
    rel, ent = index.relation_lookup(), index.entity_lookup()
    chain = ["people.person.spouse_s", "people.marriage.spouse"]
    p = path_pattern("Richard Nixon", chain, ent["Richard Nixon"], [rel[r] for r in chain], source="gold")
    q2 = path_pattern(
        "Yorba Linda",
        ["location.location.containedby"],
        ent["Yorba Linda"],
        [rel["location.location.containedby"]],
        source="gsr",
    )
    run, stats = safe_retrieve(
        index, "test", emb, [[p], [q2]], {"k": 5, "delta": 1}, encoder="hashing", cache_dir=tmp_path / "cache"
    )
    assert stats.fallback == 0 and stats.aligned_graphs >= 2
    split = index["test"]
    trip = split.global_edges()

    def names(q, sub):
        base = int(split.edge_ptr[q])
        return {
            (index.entities[h], index.relations[r], index.entities[t])
            for h, r, t in trip[[base + e for e in sub.edges]].tolist()
        }

    assert ("m.01", "people.marriage.spouse", "Pat Nixon") in names(0, run.subgraphs[0][0])
    top2 = [names(1, s) for s in run.subgraphs[1][:2]]
    assert {("Yorba Linda", "location.location.containedby", "United States")} in top2
    assert all(s.distance >= 0 for subs in run.subgraphs for s in subs)
    with pytest.raises(ValueError, match="delta"):
        SAFEConfig.from_mapping({"delta": 9})
