"""The embedded synthetic benchmark: deterministic files, valid rows, and every feature
that makes it a retrieval benchmark (mediators, hubs, inverse pairs, two-topic questions,
missing answers, one- and two-hop questions)."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from gsr_train.data import synthetic_schema as S
from gsr_train.data.rows import load_rows
from gsr_train.data.synthetic import (
    SPLITS,
    SyntheticConfig,
    build,
    ensure_synthetic,
    generate,
    load_question_meta,
    write_synthetic,
)
from gsr_train.kg.index import get_index, has_text

SMALL = SyntheticConfig(
    num_people=150,
    num_films=40,
    num_cities=20,
    num_regions=12,
    num_countries=6,
    num_organisations=12,
    num_universities=6,
    num_train=60,
    num_validation=20,
    num_test=30,
    max_triples=200,
    max_topic_degree=100,
    missing_answer_fraction=0.1,
    two_topic_fraction=0.15,
)
HUB_NAMES = set(S.GENDERS) | {c[0] for c in S.COUNTRIES} | set(S.PROFESSIONS) | {c[1] for c in S.COUNTRIES}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_synthetic(tmp_path_factory.mktemp("synthetic") / "small", SMALL)


@pytest.fixture(scope="module")
def rows(folder) -> dict[str, list[dict]]:
    out = {}
    for split in SPLITS:
        with gzip.open(folder / f"{split}.jsonl.gz", "rt", encoding="utf-8") as f:
            out[split] = [json.loads(line) for line in f]
    return out


@pytest.fixture(scope="module")
def meta(folder) -> dict[str, dict]:
    return load_question_meta(folder)


def all_rows(rows):
    return [r for split in SPLITS for r in rows[split]]


def test_same_config_gives_byte_identical_files(folder, tmp_path):
    again = write_synthetic(tmp_path / "again", SMALL)
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(p.name for p in again.iterdir())
    assert {"train.jsonl.gz", "validation.jsonl.gz", "test.jsonl.gz", "meta.json"} <= set(names)
    for name in names:
        assert (folder / name).read_bytes() == (again / name).read_bytes(), name
    other = write_synthetic(tmp_path / "other", dataclasses.replace(SMALL, seed=1))
    assert (other / "train.jsonl.gz").read_bytes() != (folder / "train.jsonl.gz").read_bytes()
    header = (folder / "train.jsonl.gz").read_bytes()[:10]
    assert header[4:8] == b"\0\0\0\0" and not header[3] & 0x08  # mtime 0, no file name


def test_files_do_not_depend_on_the_string_hash_seed(folder, tmp_path):
    """Iterating a set of strings would make the output vary with PYTHONHASHSEED."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; from gsr_train.data.synthetic import SyntheticConfig, write_synthetic; "
        f"write_synthetic(sys.argv[1], SyntheticConfig(**{dataclasses.asdict(SMALL)!r}))"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "h")], check=True, env=env)
    for split in SPLITS:
        assert (tmp_path / "h" / f"{split}.jsonl.gz").read_bytes() == (folder / f"{split}.jsonl.gz").read_bytes()


def test_rows_validate_and_index(folder, rows, tmp_path):
    for split, n in (("train", SMALL.num_train), ("validation", SMALL.num_validation), ("test", SMALL.num_test)):
        loaded, report = load_rows(folder, split)
        assert len(loaded) == n and report.skipped == 0
    index = get_index(folder, cache_dir=tmp_path)
    assert [len(index[s]) for s in SPLITS] == [SMALL.num_train, SMALL.num_validation, SMALL.num_test]
    assert int(index["train"].topic_mask.sum()) >= SMALL.num_train
    for r in all_rows(rows):
        assert r["question"] == r["question"].lower() and "{" not in r["question"]
        ents = {x for h, _, t in r["graph"] for x in (h, t)}
        assert set(r["a_entity"]) <= set(r["answer"])
        assert set(r["a_entity"]) <= ents
        assert set(r["q_entity"]) <= ents
        assert not set(r["q_entity"]) & set(r["answer"])
        assert len(r["graph"]) <= SMALL.max_triples
        assert len(set(map(tuple, r["graph"]))) == len(r["graph"])


def test_answers_lie_within_two_hops_of_a_topic(rows):
    for r in all_rows(rows):
        adj: dict[str, set[str]] = {}
        for h, _, t in r["graph"]:
            adj.setdefault(h, set()).add(t)
            adj.setdefault(t, set()).add(h)
        reach = set(r["q_entity"])
        for _ in range(2):
            reach |= {n for e in reach for n in adj.get(e, ())}
        assert set(r["a_entity"]) <= reach, r["id"]


def test_one_and_two_hop_and_two_topic_questions(rows, meta):
    hops = [meta[r["id"]]["hops"] for r in all_rows(rows)]
    assert hops.count(1) >= 0.25 * len(hops) and hops.count(2) >= 0.25 * len(hops)
    two_topic = [r for r in all_rows(rows) if len(r["q_entity"]) == 2]
    assert 0.05 * len(hops) <= len(two_topic) <= 0.3 * len(hops)
    for r in two_topic:  # the answer is reached from both topics
        m = meta[r["id"]]
        assert len(m["chains"]) == 2 and [c["topic"] for c in m["chains"]] == r["q_entity"]
    assert len({m["family"] for m in meta.values()}) >= 20


def test_mediator_nodes_carry_no_text_and_sit_on_answer_paths(rows, meta):
    mids = {x for r in all_rows(rows) for h, _, t in r["graph"] for x in (h, t) if not has_text(x)}
    assert len(mids) > 100 and all(m.startswith("m.0") for m in mids)
    spouse = [r for r in all_rows(rows) if meta[r["id"]]["family"] == "spouse" and r["a_entity"]]
    assert spouse
    for r in spouse:
        topic, answer = r["q_entity"][0], r["a_entity"][0]
        firsts = {t for h, rel, t in r["graph"] if h == topic and rel == S.SPOUSE_S}
        assert firsts and all(not has_text(m) for m in firsts)
        assert any(h in firsts and rel == S.MARRIAGE_SPOUSE and t == answer for h, rel, t in r["graph"])


def test_inverse_relation_pairs_are_both_present(rows):
    graph = {tuple(t) for r in all_rows(rows) for t in r["graph"]}
    relations = {rel for _, rel, _ in graph}
    assert {S.DIRECTED_BY, S.DIRECTOR_FILM, S.BIRTH, S.BORN_HERE, S.CONTAINEDBY, S.CONTAINS} <= relations
    for forward, backward in S.INVERSES.items():
        pairs = [(h, t) for h, rel, t in graph if rel == forward]
        if pairs:
            present = sum((t, backward, h) in graph for h, t in pairs)
            assert present >= 0.5 * len(pairs), forward


def test_hub_shortcuts_join_topic_and_answer(rows, meta):
    """Some 2-hop answers are also two hops away through a hub (Male, a country...)."""
    shortcuts = 0
    two_hop = [r for r in all_rows(rows) if meta[r["id"]]["hops"] == 2 and len(r["q_entity"]) == 1]
    for r in two_hop:
        nbrs: dict[str, set[str]] = {}
        for h, _, t in r["graph"]:
            nbrs.setdefault(h, set()).add(t)
            nbrs.setdefault(t, set()).add(h)
        topic_hubs = nbrs.get(r["q_entity"][0], set()) & HUB_NAMES
        if any(nbrs.get(a, set()) & topic_hubs for a in r["a_entity"]):
            shortcuts += 1
    assert shortcuts >= 0.2 * len(two_hop)
    degree: dict[str, int] = {}
    for r in rows["train"]:
        for h, _, t in r["graph"]:
            for x in (h, t):
                degree[x] = degree.get(x, 0) + 1
    top = sorted(degree, key=degree.get, reverse=True)[:5]
    assert set(top) & HUB_NAMES


def test_some_answers_are_missing_from_the_graph(rows, meta):
    missing = [r for r in all_rows(rows) if meta[r["id"]]["missing_answers"]]
    assert 0.05 * len(meta) <= len(missing) <= 0.2 * len(meta)
    for r in missing:
        gone = set(meta[r["id"]]["missing_answers"])
        ents = {x for h, _, t in r["graph"] for x in (h, t)}
        assert gone <= set(r["answer"]) and not gone & ents and not gone & set(r["a_entity"])


def test_config_sizes_are_respected():
    result = build(SMALL)
    types = result.world_stats["types"]
    assert types["person"] == SMALL.num_people and types["film"] == SMALL.num_films
    assert types["city"] == SMALL.num_cities and types["country"] == SMALL.num_countries
    assert types["university"] == SMALL.num_universities
    assert types["org"] == SMALL.num_organisations
    rows = generate(
        dataclasses.replace(SMALL, num_train=10, num_validation=0, num_test=7, max_triples=80, max_topic_degree=40)
    )
    assert [len(rows[s]) for s in SPLITS] == [10, 0, 7]
    assert max(len(r["graph"]) for r in rows["train"] + rows["test"]) <= 80


def test_ensure_synthetic_caches_and_repairs(tmp_path):
    cfg = dataclasses.asdict(dataclasses.replace(SMALL, num_train=8, num_validation=4, num_test=4))
    first = ensure_synthetic(cfg, tmp_path)
    assert first.parent == tmp_path / "synthetic"
    stamp = (first / "train.jsonl.gz").stat().st_mtime_ns
    assert ensure_synthetic(SyntheticConfig(**cfg), tmp_path) == first
    assert (first / "train.jsonl.gz").stat().st_mtime_ns == stamp  # not regenerated
    data = (first / "test.jsonl.gz").read_bytes()
    (first / "test.jsonl.gz").unlink()
    assert ensure_synthetic(cfg, tmp_path) == first
    assert (first / "test.jsonl.gz").read_bytes() == data
    other = ensure_synthetic(dict(cfg, seed=3), tmp_path)
    assert other != first


def test_bad_configs_are_rejected_with_a_clear_message():
    with pytest.raises(ValueError, match="unknown option.*num_peple"):
        SyntheticConfig.from_any({"num_peple": 3})
    assert SyntheticConfig(two_hop_fraction=1).key() == SyntheticConfig(two_hop_fraction=1.0).key()
    with pytest.raises(ValueError, match="two_hop_fraction"):
        SyntheticConfig(two_hop_fraction=1.5)
    with pytest.raises(ValueError, match="max_topic_degree"):
        SyntheticConfig(max_triples=100)
    with pytest.raises(ValueError, match="num_films"):
        SyntheticConfig(num_films=0)
    with pytest.raises(ValueError, match="distinct .* questions fit this world"):
        generate(dataclasses.replace(SMALL, num_train=5000))


def test_cli_writes_folder_and_prints_summary(tmp_path, capsys):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "data_prep" / "make_synthetic.py"
    spec = importlib.util.spec_from_file_location("make_synthetic", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "cli"
    args = [
        "--out",
        str(out),
        "--num_people",
        "150",
        "--num_films",
        "40",
        "--num_cities",
        "20",
        "--num_regions",
        "12",
        "--num_countries",
        "6",
        "--num_train",
        "12",
        "--num_validation",
        "4",
        "--num_test",
        "4",
        "--seed",
        "2",
        "--max_triples",
        "200",
        "--max_topic_degree",
        "100",
    ]
    assert module.main(args) == 0
    printed = capsys.readouterr().out
    assert "validation" in printed and "distinct relations" in printed
    assert len(load_rows(out, "train")[0]) == 12
    meta = json.loads((out / "meta.json").read_text())
    assert meta["config"]["seed"] == 2 and meta["summary"]["splits"]["test"]["questions"] == 4
