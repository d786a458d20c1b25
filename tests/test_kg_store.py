"""The whole-KG store: ``gsr-train import-kg`` on every format, bad lines, resuming, reuse, refusals,
and extraction (k hops, the PageRank cap) checked against brute force."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import networkx as nx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gsr_train.commands.import_kg import main as import_main
from gsr_train.kg import store_build, triple_sources
from gsr_train.kg.extract import Extractor
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.store import KGStoreError, open_store
from gsr_train.kg.store_build import import_kg
from gsr_train.kg.triple_sources import KGImportError

TRIPLES = [("A", "r1", "B"), ("B", "r2", "C"), ("C", "r1", "m.01"), ("m.01", "r3", "D"), ("A", "r2", "D")]


def write_tsv(path: Path, triples, header: bool = True) -> Path:
    lines = (["head\trelation\ttail"] if header else []) + ["\t".join(t) for t in triples]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    return path


def store_triples(store) -> list[tuple[str, str, str]]:
    return list(
        zip(store.entities.take(store.heads), store.relations.take(store.rels), store.entities.take(store.tails))
    )


def random_kg(n_nodes: int = 300, n_edges: int = 1500, seed: int = 0) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    return [
        (f"e{rng.randrange(n_nodes)}", f"r{rng.randrange(12)}", f"e{rng.randrange(n_nodes)}") for _ in range(n_edges)
    ]


# ----------------------------------------------------------------------------- import


def test_tsv_with_header_and_names_file(tmp_path):
    names = tmp_path / "names.tsv"
    names.write_text("A\tAlpha\nA\tThe A\nD\tDelta\n")
    meta = import_kg([write_tsv(tmp_path / "kg.tsv", TRIPLES)], tmp_path / "store", names=names)
    store = open_store(tmp_path / "store")
    assert meta["triples"] == 5 and meta["entities"] == 5 and meta["relations"] == 3 and meta["action"] == "built"
    assert store_triples(store) == TRIPLES
    # adjacency both ways: every edge once, under its head / its tail, in file order
    for ptr, edge, column in ((store.out_ptr, store.out_edge, store.heads), (store.in_ptr, store.in_edge, store.tails)):
        for node in range(store.num_entities):
            mine = list(edge[ptr[node] : ptr[node + 1]])
            assert mine == [e for e in range(5) if column[e] == node]
    assert store.display_names(np.arange(5)).to_pylist() == ["Alpha", "B", "C", "m.01", "Delta"]
    assert list(store.entities_named("The A")) == [0] and list(store.entities_named("B")) == [1]
    assert store.entities_named("nobody").size == 0
    assert meta["labelled_entities"] == 2


def test_csv_gz_parquet_and_the_same_triples(tmp_path):
    csv = tmp_path / "kg.csv.gz"
    with gzip.open(csv, "wt") as f:
        f.write('subject,predicate,object\n"A, the first",r1,B\nB,r2,C\n')
    import_kg([csv], tmp_path / "a")
    assert store_triples(open_store(tmp_path / "a")) == [("A, the first", "r1", "B"), ("B", "r2", "C")]
    pq.write_table(
        pa.table({"head": ["A", "B"], "relation": ["r1", "r2"], "tail": ["B", "C"], "x": [1, 2]}),
        tmp_path / "kg.parquet",
    )
    import_kg([tmp_path / "kg.parquet", write_tsv(tmp_path / "more.tsv", TRIPLES[2:], header=False)], tmp_path / "b")
    assert store_triples(open_store(tmp_path / "b")) == [("A", "r1", "B"), ("B", "r2", "C"), *TRIPLES[2:]]


NT = """<http://x/A> <http://x/knows> <http://x/B> .
<http://x/A> <http://www.w3.org/2000/01/rdf-schema#label> "Alice"@en .
<http://x/A> <http://www.w3.org/2000/01/rdf-schema#label> "Alicia"@es .
<http://x/A> <http://www.w3.org/2004/02/skos/core#altLabel> "Al" .
<http://x/B> <http://x/age> "42"^^<http://www.w3.org/2001/XMLSchema#integer> .
<http://x/B> <http://x/event> _:cvt1 .
_:cvt1 <http://x/place> <http://x/C> .
"""


def test_ntriples_labels_aliases_attributes_and_blank_nodes(tmp_path):
    path = tmp_path / "kg.nt.gz"
    with gzip.open(path, "wt") as f:
        f.write(NT)
    meta = import_kg([path], tmp_path / "store")
    store = open_store(tmp_path / "store")
    assert [(h, r.rsplit("/", 1)[1], t) for h, r, t in store_triples(store)] == [
        ("http://x/A", "knows", "http://x/B"),
        ("http://x/B", "event", "_:cvt1"),
        ("_:cvt1", "place", "http://x/C"),
    ]
    assert meta["attributes_left_out"] == 1 and meta["labelled_entities"] == 1  # Alicia (es) left out
    assert list(store.entities_named("Alice")) == list(store.entities_named("Al")) == [0]
    assert store.display_names(np.arange(4)).to_pylist() == ["Alice", "http://x/B", "_:cvt1", "http://x/C"]


def test_a_bad_line_is_named_or_counted(tmp_path):
    path = tmp_path / "kg.tsv"
    path.write_text("A\tr1\tB\nB\tr2\nC\tr1\t\nC\tr1\tD\n")
    with pytest.raises(KGImportError, match=r"kg.tsv:2: 2 fields, expected 3 \(--skip_bad"):
        import_kg([path], tmp_path / "store")
    assert not (tmp_path / "store").exists()
    meta = import_kg([path], tmp_path / "store", skip_bad=True)
    assert meta["triples"] == 2 and meta["bad_lines"]["by_reason"] == {"2 fields, expected 3": 1, "an empty field": 1}
    nt = tmp_path / "kg.nt"
    nt.write_text(NT + "this is not a triple\n")
    with pytest.raises(KGImportError, match=r"kg.nt:8: not NT"):
        import_kg([nt], tmp_path / "nt")
    assert import_kg([nt], tmp_path / "nt", skip_bad=True)["bad_lines"]["total"] == 1


def test_refusals_are_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        import_main([str(tmp_path / "missing.tsv"), "--out", str(tmp_path / "s")])
    assert stop.value.code == 2 and "missing.tsv does not exist" in capsys.readouterr().err
    (tmp_path / "kg.json").write_text("{}")
    with pytest.raises(SystemExit):
        import_main([str(tmp_path / "kg.json"), "--out", str(tmp_path / "s")])
    assert "unknown KG file type 'json'" in capsys.readouterr().err


def test_the_same_files_again_reuse_the_store_and_other_files_need_overwrite(tmp_path):
    kg = write_tsv(tmp_path / "kg.tsv", TRIPLES)
    import_kg([kg], tmp_path / "store")
    assert import_kg([kg], tmp_path / "store")["action"] == "reused"
    other = write_tsv(tmp_path / "other.tsv", TRIPLES[:2])
    with pytest.raises(KGImportError, match="already exists and holds something else: --overwrite"):
        import_kg([other], tmp_path / "store")
    assert import_kg([other], tmp_path / "store", overwrite=True)["triples"] == 2


def test_a_store_of_another_version_or_damaged_is_one_line(tmp_path):
    import_kg([write_tsv(tmp_path / "kg.tsv", TRIPLES)], tmp_path / "store")
    meta_path = tmp_path / "store" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "version": 0}))
    with pytest.raises(KGStoreError, match="a KG store of version 0, built by another gsr-train"):
        open_store(tmp_path / "store")
    meta_path.write_text(json.dumps(meta))
    with open(tmp_path / "store" / "out_edge.bin", "r+b") as f:
        f.truncate(4)
    with pytest.raises(KGStoreError, match="damaged KG store"):
        open_store(tmp_path / "store")
    with pytest.raises(KGStoreError, match="no such KG store"):
        open_store(tmp_path / "nowhere")


def test_an_import_stopped_midway_resumes_to_the_same_store(tmp_path, monkeypatch):
    triples = random_kg(n_edges=3000)
    kg = write_tsv(tmp_path / "kg.tsv", triples, header=False)
    import_kg([kg], tmp_path / "clean")
    monkeypatch.setattr(triple_sources, "BLOCK_BYTES", 4096)  # many batches
    monkeypatch.setattr(store_build, "CHECKPOINT_SECONDS", 0.0)
    real = store_build._Import.add
    calls = {"n": 0}

    def stop_at_seven(self, batch):
        calls["n"] += 1
        if calls["n"] == 7:
            raise KeyboardInterrupt("killed")
        return real(self, batch)

    monkeypatch.setattr(store_build._Import, "add", stop_at_seven)
    with pytest.raises(KeyboardInterrupt):
        import_kg([kg], tmp_path / "store")
    assert not (tmp_path / "store").exists() and (tmp_path / ".store.partial" / "progress.json").exists()
    monkeypatch.setattr(store_build._Import, "add", real)
    meta = import_kg([kg], tmp_path / "store")
    assert meta["action"] == "resumed" and not (tmp_path / ".store.partial").exists()
    a, b = open_store(tmp_path / "clean"), open_store(tmp_path / "store")
    assert store_triples(a) == store_triples(b) == triples
    for name in ("out_ptr", "out_edge", "in_ptr", "in_edge"):
        assert np.array_equal(getattr(a, name), getattr(b, name))


# ----------------------------------------------------------------------------- extraction


def brute_khop(triples, topics: set[str], hops: int) -> set[int]:
    """Edges with an endpoint within ``hops - 1`` of a topic, both directions (networkx BFS)."""
    graph = nx.MultiGraph()
    graph.add_edges_from((h, t) for h, _, t in triples)
    near = {n for t in topics for n, d in nx.single_source_shortest_path_length(graph, t, cutoff=hops - 1).items()}
    return {i for i, (h, _, t) in enumerate(triples) if h in near or t in near}


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_uncapped_extraction_is_the_khop_neighbourhood(tmp_path, hops):
    triples = random_kg()
    import_kg([write_tsv(tmp_path / "kg.tsv", triples)], tmp_path / "store")
    store = open_store(tmp_path / "store")
    extractor = Extractor(store, ExtractOptions(hops=hops, max_triples=10**6))
    for topics in (["e1"], ["e5", "e77"], ["e299"]):
        ids = np.array([store.entities.index(t) for t in topics if t in store.entities])
        assert set(extractor.edges(ids).tolist()) == brute_khop(triples, set(topics) & set(store.entities), hops)


def test_the_cap_keeps_the_edges_pagerank_ranks_first_the_same_every_time(tmp_path):
    triples = random_kg(n_nodes=200, n_edges=4000)
    import_kg([write_tsv(tmp_path / "kg.tsv", triples)], tmp_path / "store")
    store = open_store(tmp_path / "store")
    topic = np.array([store.entities.index("e3")])
    full = set(Extractor(store, ExtractOptions(max_triples=10**6)).edges(topic).tolist())
    capped = Extractor(store, ExtractOptions(max_triples=100)).edges(topic)
    assert capped.size == 100 and set(capped.tolist()) <= full
    assert np.array_equal(capped, Extractor(store, ExtractOptions(max_triples=100)).edges(topic))
    touching = [e for e in full if store.heads[e] == topic[0] or store.tails[e] == topic[0]]
    kept = set(capped.tolist())
    assert sum(e in kept for e in touching) >= min(len(touching), 100) * 0.9  # the topic's own edges first
    assert Extractor(store).edges(np.zeros(0, dtype=np.int64)).size == 0


# ----------------------------------------------------------------------------- probes


KILLABLE = """
import sys
from gsr_train.kg import store_build, triple_sources
store_build.CHECKPOINT_SECONDS = 0.0
triple_sources.BLOCK_BYTES = 1 << 14
store_build.import_kg([sys.argv[1]], sys.argv[2])
"""


def test_kill_9_during_an_import_then_the_same_command_resumes_to_the_same_store(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    triples = random_kg(n_nodes=5000, n_edges=200_000, seed=3)
    kg = write_tsv(tmp_path / "kg.tsv", triples, header=False)
    import_kg([kg], tmp_path / "clean")
    progress = tmp_path / ".store.partial" / "progress.json"
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE, str(kg), str(tmp_path / "store")])
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if progress.exists() and json.loads(progress.read_text())["position"][1] >= 3:
            break
        time.sleep(0.02)
    if proc.poll() is not None:
        pytest.skip("the import finished before it could be killed")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "store").exists()
    meta = import_kg([kg], tmp_path / "store")
    assert meta["action"] == "resumed"
    a, b = open_store(tmp_path / "clean"), open_store(tmp_path / "store")
    assert a.entities == b.entities and a.relations == b.relations
    for name in ("heads", "rels", "tails", "out_ptr", "out_edge", "in_ptr", "in_edge"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_two_imports_of_one_store_at_once_build_it_once(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    kg = write_tsv(tmp_path / "kg.tsv", random_kg(n_edges=20_000))
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: import_kg([kg], tmp_path / "store"), range(2)))
    assert sorted(r["action"] for r in results) == ["built", "reused"]
    assert open_store(tmp_path / "store").num_triples == 20_000


def test_a_truncated_gzip_file_is_one_line(tmp_path):
    path = write_tsv(tmp_path / "kg.tsv.gz", random_kg(n_edges=50_000))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(KGImportError, match=r"kg.tsv.gz: cannot be read"):
        import_kg([path], tmp_path / "store")
