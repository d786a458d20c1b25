"""The streaming, memory-mapped KG index: same content as the in-memory reference builder,
on multi-shard corpora bigger than one batch, resumable after a kill, and clear about bad input.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing as mp
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from gsr_train.data.rog_corpus import CorpusSpec, write_corpus
from gsr_train.data.rows import DataFileError, RowError
from gsr_train.kg.index import get_index, index_key, open_index
from gsr_train.kg.index_build import build_index_folder

from .oracles.index_reference import build_index_in_memory

SPLITS = ["train", "validation", "test"]
ARRAYS = ("ent_ptr", "entity_ids", "topic_mask", "answer_mask", "edge_ptr", "edge_index", "edge_rel")


def _same(index, ref, splits=SPLITS):
    assert list(index.entities) == list(ref.entities)
    assert list(index.relations) == list(ref.relations)
    for s in splits:
        a, b = index[s], ref[s]
        assert a.ids == b.ids and a.questions == b.questions and a.answers == b.answers
        for name in ARRAYS:
            assert torch.equal(getattr(a, name).long(), getattr(b, name).long()), (s, name)


def _corpus_spec() -> CorpusSpec:
    """The generated corpus's spec, written once: the fixture and the determinism test write the same."""
    return CorpusSpec(
        questions={"train": 40, "validation": 7, "test": 12},
        triples_per_question=120,
        num_relations=60,
        relations_per_graph=12,
        rows_per_group=5,
        triples_per_shard=2000,
        empty_graph_share=0.05,
        duplicate_share=0.02,
        seed=7,
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A generated RoG corpus: several parquet shards per split, many row groups."""
    spec = _corpus_spec()
    folder = tmp_path_factory.mktemp("corpus")
    write_corpus(spec, folder)
    return folder / "data"


def test_generated_corpus_is_sharded_and_deterministic(corpus, tmp_path):
    shards = sorted(p.name for p in corpus.glob("train-*.parquet"))
    assert len(shards) >= 2 and shards[0].endswith(f"-of-{len(shards):05d}.parquet")
    again = tmp_path / "again"
    spec = _corpus_spec()
    write_corpus(spec, again)
    for p in corpus.iterdir():
        assert (again / "data" / p.name).read_bytes() == p.read_bytes()


@pytest.mark.parametrize("batch_rows", [1, 3, 64])
def test_streaming_build_equals_in_memory_reference(corpus, tmp_path, batch_rows):
    index = get_index(corpus, SPLITS, cache_dir=tmp_path, batch_rows=batch_rows)
    ref = build_index_in_memory(corpus, SPLITS, skip_invalid=False)
    _same(index, ref)
    assert index.meta["skips"]["train"]["duplicate_triples_dropped"] > 0  # the corpus has duplicates


@pytest.mark.slow
def test_real_fixture_equals_reference(webqsp_mini, tmp_path):
    index = get_index(webqsp_mini, SPLITS, cache_dir=tmp_path, skip_invalid=True, batch_rows=7)
    _same(index, build_index_in_memory(webqsp_mini, SPLITS, skip_invalid=True))


def test_opened_index_is_memory_mapped_in_narrow_dtypes(corpus, tmp_path):
    get_index(corpus, SPLITS, cache_dir=tmp_path)
    index = get_index(corpus, SPLITS, cache_dir=tmp_path)  # second call: opened, not built
    train = index["train"]
    assert train.entity_ids.dtype == torch.int32 and train.edge_index.dtype == torch.int32
    assert train.edge_rel.dtype == torch.int32 and train.topic_mask.dtype == torch.bool
    # views of the files, not copies: the data pointer lies inside a mapping of the index folder
    maps = Path("/proc/self/maps").read_text().splitlines()
    ptr = train.edge_index.data_ptr()
    owner = [
        line for line in maps if int(line.split()[0].split("-")[0], 16) <= ptr < int(line.split()[0].split("-")[1], 16)
    ]
    assert owner and "edge_index.bin" in owner[0]


def test_killed_build_resumes_to_the_same_index(corpus, tmp_path):
    key = index_key(corpus, SPLITS, False)
    folder = tmp_path / "kg_index" / key
    first = build_index_folder(corpus, SPLITS, folder, key=key, batch_rows=2, stop_after_batches=9)
    assert first == {"stopped": True} and not folder.exists()
    progress = json.loads((folder.with_name(f".{key}.partial") / "progress.json").read_text())
    assert progress["current"]["split"] == "train"
    # a kill leaves bytes past the checkpoint: the resume must cut them off
    with open(folder.with_name(f".{key}.partial") / "train" / "edge_rel.bin", "ab") as f:
        f.write(b"\x07" * 40)
    build_index_folder(corpus, SPLITS, folder, key=key, batch_rows=2, stop_after_batches=25)  # into validation
    build_index_folder(corpus, SPLITS, folder, key=key, batch_rows=2)
    _same(open_index(folder, key), build_index_in_memory(corpus, SPLITS, skip_invalid=False))


def _build_in_process(args):
    corpus, cache = args
    index = get_index(corpus, SPLITS, cache_dir=cache)
    return index.entities.fingerprint(), int(index["train"].total_edges)


def test_two_processes_building_at_once_get_one_index(corpus, tmp_path):
    with mp.get_context("spawn").Pool(2) as pool:
        results = pool.map(_build_in_process, [(str(corpus), str(tmp_path))] * 2)
    assert results[0] == results[1]
    names = [p.name for p in (tmp_path / "kg_index").iterdir()]
    assert len([n for n in names if not n.startswith(".")]) == 1  # one published index
    assert not [n for n in names if n.endswith(".partial")]  # no half-built folder left behind


# ---------------------------------------------------------------------------- bad input
def _rows(n=3, graph=(("a", "r", "b"), ("b", "r2", "c"))):
    return [
        {
            "id": f"q{i}",
            "question": f"what {i}",
            "answer": ["c"],
            "q_entity": ["a"],
            "a_entity": ["c"],
            "graph": [list(t) for t in graph],
            "choices": [],
        }
        for i in range(n)
    ]


def _write_parquet(path: Path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)


def test_truncated_parquet_shard_is_named(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split in SPLITS:
        _write_parquet(data / f"{split}-00000-of-00002.parquet", _rows())
        _write_parquet(data / f"{split}-00001-of-00002.parquet", _rows())
    bad = data / "train-00001-of-00002.parquet"
    bad.write_bytes(bad.read_bytes()[:-60])
    with pytest.raises(DataFileError, match="train-00001-of-00002.parquet"):
        get_index(data, SPLITS, cache_dir=tmp_path / "cache")


def test_truncated_gzip_and_bad_utf8_are_reported_by_line(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split in ("validation", "test"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    payload = "".join(json.dumps(r) + "\n" for r in _rows(50)).encode()
    (data / "train.jsonl.gz").write_bytes(gzip.compress(payload)[:-300])
    with pytest.raises((RowError, DataFileError), match=r"train\.jsonl\.gz"):
        get_index(data, SPLITS, cache_dir=tmp_path / "cache")
    (data / "train.jsonl.gz").unlink()
    (data / "train.jsonl").write_bytes(json.dumps(_rows(1)[0]).encode() + b"\n" + b'{"id": "q\xff"}\n')
    with pytest.raises(RowError, match="line 2"):
        get_index(data, SPLITS, cache_dir=tmp_path / "cache")


def test_two_files_for_one_split_is_an_error_before_any_work(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split in SPLITS:
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    _write_parquet(data / "test.parquet", _rows())
    with pytest.raises(FileExistsError, match="test"):
        get_index(data, SPLITS, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache" / "kg_index").exists() or not any((tmp_path / "cache" / "kg_index").iterdir())


def test_bad_row_in_a_later_batch_names_row_and_field_and_skip_counts(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split in SPLITS:
        rows = [{**r, "id": f"{split[:2]}{r['id']}", "question": f"{split} {r['question']}"} for r in _rows(20)]
        if split == "train":
            rows[17]["id"] = "q17"
            rows[17]["graph"] = [["a", "", "b"]]
        _write_parquet(data / f"{split}.parquet", rows)
    with pytest.raises(RowError, match=r"row 'q17'.*field 'graph'"):
        get_index(data, SPLITS, cache_dir=tmp_path / "cache", batch_rows=4)
    index = get_index(data, SPLITS, cache_dir=tmp_path / "cache", batch_rows=4, skip_invalid=True)
    assert len(index["train"]) == 19 and sum(index.meta["skips"]["train"]["skipped"].values()) == 1


def test_damaged_index_file_is_rebuilt_not_trusted(corpus, tmp_path, caplog):
    index = get_index(corpus, SPLITS, cache_dir=tmp_path)
    expected = index["test"].edge_rel.clone()
    folder = tmp_path / "kg_index" / index.key
    target = folder / "test" / "edge_rel.bin"
    raw = bytearray(target.read_bytes())
    raw[5] ^= 0xFF
    target.write_bytes(bytes(raw))
    del index
    again = get_index(corpus, SPLITS, cache_dir=tmp_path)
    assert torch.equal(again["test"].edge_rel, expected)
    assert "rebuilding KG index" in caplog.text
    assert np.array_equal(np.fromfile(target, dtype=np.int32), expected.numpy())


def test_index_and_embeddings_pickle_as_their_files(corpus, tmp_path):
    """ddp_spawn pickles the data module to every rank: the arrays must travel as paths."""
    import io
    import pickle
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers torch's tensor reducers)

    from gsr_train.text.embeddings import get_embeddings

    index = get_index(corpus, SPLITS, cache_dir=tmp_path)
    emb = get_embeddings(index, {"name": "hashing", "dim": 16}, tmp_path)
    for obj in (index, emb):
        buf = io.BytesIO()
        ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(obj)  # what torch.multiprocessing uses
        assert len(buf.getvalue()) < 200_000
        assert len(pickle.dumps(obj)) < 200_000  # by value this would be megabytes
    again = pickle.loads(pickle.dumps(index))
    _same(again, index)
    emb2 = pickle.loads(pickle.dumps(emb))
    assert torch.equal(emb2.entity, emb.entity) and torch.equal(emb2.question["test"], emb.question["test"])
    # an in-memory index (no folder) still pickles by value
    ref = build_index_in_memory(corpus, SPLITS, skip_invalid=False)
    _same(pickle.loads(pickle.dumps(ref)), ref)
