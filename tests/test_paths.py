import json
import os
import random

import pytest
import torch

from gsr_train.kg.chains import walk_chains
from gsr_train.kg.index import SplitGraphs, get_index
from gsr_train.kg.paths import (
    Supervision,
    build_supervision,
    chain_names,
    chains_to_names,
    get_supervision,
)

from .oracles.paths_oracle import oracle_supervision
from .test_rows import good_row, write


def make_split(questions):
    """SplitGraphs from ``[(triples, topics, answers), ...]`` with string names.

    Returns the split and the relation vocabulary (relation id = position).
    """
    rels: dict[str, int] = {}
    ent_ptr, edge_ptr, ents, topic, answer, heads, tails, rel_ids = [0], [0], [], [], [], [], [], []
    for triples, topics, answers in questions:
        local: dict[str, int] = {}
        for name in [*topics, *answers, *(x for h, _, t in triples for x in (h, t))]:
            local.setdefault(name, len(local))
        for h, r, t in triples:
            heads.append(local[h])
            tails.append(local[t])
            rel_ids.append(rels.setdefault(r, len(rels)))
        ents += list(range(len(local)))
        topic += [n in topics for n in local]
        answer += [n in answers for n in local]
        ent_ptr.append(ent_ptr[-1] + len(local))
        edge_ptr.append(edge_ptr[-1] + len(triples))
    split = SplitGraphs(
        ids=[f"q{i}" for i in range(len(questions))],
        questions=["?"] * len(questions),
        answers=[list(a) for _, _, a in questions],
        ent_ptr=torch.tensor(ent_ptr),
        entity_ids=torch.tensor(ents, dtype=torch.long),
        topic_mask=torch.tensor(topic, dtype=torch.bool),
        answer_mask=torch.tensor(answer, dtype=torch.bool),
        edge_ptr=torch.tensor(edge_ptr),
        edge_index=torch.tensor([heads, tails], dtype=torch.long).reshape(2, -1),
        edge_rel=torch.tensor(rel_ids, dtype=torch.long),
    )
    return split, list(rels)


def named(chains, rels):
    return {tuple(rels[r] for r in c) for c in chains}


def test_parallel_relations_on_a_shortest_path_are_all_labelled():
    triples = [("Q", "r1", "M"), ("Q", "r2", "M"), ("M", "r3", "A"), ("Q", "r4", "X"), ("X", "r5", "M2")]
    split, rels = make_split([(triples, ["Q"], ["A"])])
    sup = build_supervision(split)
    assert sup.triple_label.tolist() == [True, True, True, False, False]
    assert sup.hops.tolist() == [2] and sup.num_no_path == 0
    assert named(sup.chains_filtered[0], rels) == {("r1", "r3"), ("r2", "r3")}
    assert named(sup.chains_raw[0], rels) == {("r1", "r3"), ("r2", "r3")}


def test_only_backward_direction():
    split, rels = make_split([([("A", "r1", "M"), ("M", "r2", "Q"), ("Q", "r9", "Z")], ["Q"], ["A"])])
    sup = build_supervision(split)
    assert sup.triple_label.tolist() == [True, True, False]
    assert sup.hops.tolist() == [2]
    # read from the topic entity: r2 is met first
    assert named(sup.chains_raw[0], rels) == {("r2", "r1")}
    assert sup.chains_filtered[0] == []


@pytest.mark.parametrize("shorter", ["backward", "forward"])
def test_both_directions_keep_only_the_shorter(shorter):
    if shorter == "backward":
        triples = [("Q", "f1", "M"), ("M", "f2", "A"), ("A", "b1", "Q")]
        expect, chains = [False, False, True], {("b1",)}
    else:
        triples = [("Q", "f1", "A"), ("A", "b1", "M"), ("M", "b2", "Q")]
        expect, chains = [True, False, False], {("f1",)}
    split, rels = make_split([(triples, ["Q"], ["A"])])
    sup = build_supervision(split)
    assert sup.triple_label.tolist() == expect
    assert sup.hops.tolist() == [1]
    assert named(sup.chains_raw[0], rels) == chains


def test_equal_lengths_keep_both_directions():
    triples = [("Q", "f1", "M"), ("M", "f2", "A"), ("A", "b1", "N"), ("N", "b2", "Q"), ("Q", "x", "A2")]
    split, rels = make_split([(triples, ["Q"], ["A"])])
    sup = build_supervision(split)
    assert sup.triple_label.tolist() == [True, True, True, True, False]
    assert sup.hops.tolist() == [2]
    assert named(sup.chains_raw[0], rels) == {("f1", "f2"), ("b2", "b1")}
    assert named(sup.chains_filtered[0], rels) == {("f1", "f2")}


def test_direction_is_decided_per_pair():
    # pair (Q, A1): forward 1 hop; pair (Q, A2): only forward, 3 hops -> both kept
    triples = [("Q", "r1", "A1"), ("Q", "r2", "M"), ("M", "r3", "N"), ("N", "r4", "A2"), ("A1", "r5", "Q")]
    split, rels = make_split([(triples, ["Q"], ["A1", "A2"])])
    sup = build_supervision(split)
    assert sup.triple_label.tolist() == [True, True, True, True, True]  # r5: a->q of equal length 1
    assert sup.hops.tolist() == [1]
    assert named(sup.chains_raw[0], rels) == {("r1",), ("r5",), ("r2", "r3", "r4")}
    assert named(sup.chains_filtered[0], rels) == {("r1",), ("r2", "r3", "r4")}


def test_no_path_and_topic_is_answer():
    split, _ = make_split(
        [
            ([("Q", "r1", "X"), ("A", "r2", "Y")], ["Q"], ["A"]),  # no directed path either way
            ([("Q", "r1", "X")], ["Q"], ["MISSING"]),  # answer is an isolated node
            ([("Q", "r1", "X")], ["Q"], ["Q"]),  # topic is the only answer
            ([("Q", "r1", "X"), ("X", "r2", "A")], ["Q"], ["Q", "A"]),  # ... plus a real answer
            ([("Q", "r1", "X")], [], ["X"]),  # no topic entity
        ]
    )
    sup = build_supervision(split)
    assert sup.hops.tolist() == [-1, -1, 0, 2, -1]
    assert sup.num_no_path == 3
    assert sup.triple_label.tolist() == [False, False, False, False, True, True, False]
    assert sup.chains_raw[:3] == [[], [], []] and sup.chains_raw[4] == []
    assert sup.num_positives(split).tolist() == [0, 0, 0, 2, 0]


def test_multiple_topics_union():
    triples = [("Q1", "r1", "A"), ("Q2", "r2", "M"), ("M", "r3", "A"), ("Q2", "r4", "Z")]
    split, rels = make_split([(triples, ["Q1", "Q2"], ["A"])])
    sup = build_supervision(split)
    assert sup.triple_label.tolist() == [True, True, True, False]
    assert sup.hops.tolist() == [1]  # min over pairs
    assert named(sup.chains_raw[0], rels) == {("r1",), ("r2", "r3")}


def test_chain_cap_is_deterministic_and_counted():
    triples = [("Q", f"a{i}", f"M{i}") for i in range(4)] + [
        (f"M{i}", f"b{j}", "A") for i in range(4) for j in range(3)
    ]
    split, rels = make_split([(triples, ["Q"], ["A"])])
    full = build_supervision(split, max_chains=100)
    assert len(full.chains_raw[0]) == 12 and full.num_chains_capped == 0
    capped = build_supervision(split, max_chains=5)
    assert len(capped.chains_raw[0]) == 5 and capped.num_chains_capped == 1
    assert set(capped.chains_raw[0]) < set(full.chains_raw[0])
    assert torch.equal(capped.triple_label, full.triple_label)  # the cap never touches labels
    assert capped.chains_raw == build_supervision(split, max_chains=5).chains_raw


def test_walk_chains_merges_entity_paths_with_the_same_relations():
    # 3 parallel CVT nodes reached by the same relations: 3 entity paths, one chain
    steps = {0: [(7, 1), (7, 2), (7, 3)], 1: [(8, 9)], 2: [(8, 9)], 3: [(8, 9)]}
    assert walk_chains(0, steps, {9}, 10) == ([(7, 8)], False)
    with pytest.raises(ValueError):
        walk_chains(0, steps, {9}, 0)


def random_questions(rng: random.Random, n: int):
    out = []
    for _ in range(n):
        nodes = [f"e{i}" for i in range(rng.randint(2, 12))]
        triples = set()
        for _ in range(rng.randint(0, 22)):
            triples.add((rng.choice(nodes), f"r{rng.randint(0, 3)}", rng.choice(nodes)))  # self loops too
        topics = rng.sample(nodes, rng.choice([1, 1, 2]))
        answers = rng.sample(nodes, rng.randint(0, min(3, len(nodes)))) + (["isolated"] if rng.random() < 0.1 else [])
        out.append((sorted(triples), topics, answers))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agrees_with_networkx_oracle_on_random_graphs(seed):
    split, _ = make_split(random_questions(random.Random(seed), 150))
    sup = build_supervision(split, max_chains=10_000)
    ref = oracle_supervision(split, chains=True)
    assert torch.equal(sup.triple_label, ref.triple_label)
    assert torch.equal(sup.hops, ref.hops)
    assert [set(c) for c in sup.chains_raw] == ref.chains_raw
    assert [set(c) for c in sup.chains_filtered] == ref.chains_filtered
    assert sup.num_no_path == int((ref.hops < 0).sum())
    # chunking is an implementation detail
    tiny = build_supervision(split, max_chains=10_000, chunk_states=7)
    assert torch.equal(tiny.triple_label, sup.triple_label) and tiny.chains_raw == sup.chains_raw


def test_agrees_with_oracle_on_real_graphs(webqsp_mini, tmp_path):
    index = get_index(webqsp_mini, splits=("validation",), cache_dir=tmp_path)
    split = index["validation"].subset(range(60))
    sup = build_supervision(split)
    ref = oracle_supervision(split)
    assert torch.equal(sup.triple_label, ref.triple_label)
    assert torch.equal(sup.hops, ref.hops)
    assert sup.triple_label.any() and (sup.hops > 0).any()


def test_bad_edge_is_reported_with_question_id():
    split, _ = make_split([([("Q", "r", "A")], ["Q"], ["A"]), ([("Q", "r", "A")], ["Q"], ["A"])])
    split.edge_index[1, 1] = 5
    with pytest.raises(ValueError, match="question 'q1'"):
        build_supervision(split)


def test_cache_reused_and_rebuilt_on_truncation(tmp_path, caplog):
    data, cache = tmp_path / "d", tmp_path / "c"
    write(data / "train.jsonl", [good_row(0), good_row(1, q_entity=["Y"], a_entity=["X"])])
    index = get_index(data, splits=("train",), cache_dir=cache)
    first = get_supervision(index, "train", cache)
    assert first.triple_label.tolist() == [True, True, True, True] and first.hops.tolist() == [2, 2]
    files = list((cache / "supervision").glob("train-*.pt"))
    assert len(files) == 1
    pt = files[0]
    stamp = os.stat(pt).st_mtime_ns
    again = get_supervision(index, "train", cache)
    assert os.stat(pt).st_mtime_ns == stamp
    assert again.chains_raw == first.chains_raw and torch.equal(again.hops, first.hops)
    assert isinstance(again.chains_raw[0][0], tuple)

    # another option -> another file
    get_supervision(index, "train", cache, max_chains=3)
    assert len(list((cache / "supervision").glob("train-*.pt"))) == 2

    blob = pt.read_bytes()
    pt.write_bytes(blob[: len(blob) // 2])
    with caplog.at_level("WARNING"):
        rebuilt = get_supervision(index, "train", cache)
    assert "truncated" in caplog.text
    assert torch.equal(rebuilt.triple_label, first.triple_label)
    assert json.loads(pt.with_suffix(".json").read_text())["bytes"] == pt.stat().st_size

    # same size, different content -> checksum mismatch -> rebuilt
    blob = bytearray(pt.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    pt.write_bytes(bytes(blob))
    caplog.clear()
    with caplog.at_level("WARNING"):
        get_supervision(index, "train", cache)
    assert "checksum" in caplog.text


def test_relation_names(tmp_path):
    data = tmp_path / "d"
    write(data / "train.jsonl", [good_row(0)])
    index = get_index(data, splits=("train",), cache_dir=tmp_path / "c")
    sup = get_supervision(index, "train", tmp_path / "c")
    assert chains_to_names(sup.chains_filtered, index) == [[("people.person.spouse_s", "people.marriage.spouse")]]
    assert chain_names(sup.chains_raw[0][0], index.relations) == ("people.person.spouse_s", "people.marriage.spouse")
    assert isinstance(sup, Supervision)
