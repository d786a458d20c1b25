"""Streaming build of the KG index folder: record batches in, CSR arrays on disk out.

Memory stays flat whatever the corpus size: rows are read a batch at a time
(:mod:`gsr_train.data.row_batches`), names are interned by compiled kernels over the Arrow
buffers (:mod:`gsr_train.kg.encode_kernels`), and every array is appended to its file as it
is produced, in the narrowest dtype that holds it (int32 ids, bool masks, int64 offsets).
What stays in memory is the vocabulary (bytes of the distinct names + its hash table) and
one batch.

The build runs in ``.<name>.partial/`` next to the final folder and checkpoints every few
seconds (file sizes, vocabulary size, the unit and row reached, skip counts). A killed build
resumes from its last checkpoint: files are cut back to the recorded sizes, the vocabulary
is re-hashed from its files and reading continues at the recorded row. Only a finished,
checksummed folder is renamed into place. A file lock keeps two processes from building the
same index at once (the second waits and then reuses the result).

Folder layout (every array a raw little-endian file; dtypes and shapes in ``meta.json``)::

    meta.json                       format, key, files {bytes, dtype, shape, check}, skips, counts
    vocab/{entities,relations}.{offsets,data,table,hashes}.bin
    <split>/{ent_ptr,entity_ids,topic_mask,answer_mask,edge_ptr,edge_index,edge_rel}.bin
    <split>/row_hash.bin            uint64 fingerprint of each row (question, answers, set of triples)
    <split>/questions.jsonl         [id, question, answers] per question

``meta.json`` also records train/test leakage found while building (``overlap``: question
ids, or whole rows, present in two splits); :func:`gsr_train.kg.index.get_index` refuses
such an index unless ``allow_overlap`` is set.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from gsr_train.arrays import AppendFile, file_check
from gsr_train.data.row_batches import RowBatch, SplitSource
from gsr_train.data.rows import SkipReport
from gsr_train.io import file_lock, write_json
from gsr_train.kg import encode_kernels as K
from gsr_train.kg.vocab import StringInterner
from gsr_train.progress import progress

log = logging.getLogger(__name__)

INDEX_FORMAT = 3
PROGRESS_FILE = "progress.json"
VOCABS = ("entities", "relations")
# split arrays: name -> dtype (edge_index is [2, E]: heads then tails)
SPLIT_ARRAYS = {"ent_ptr": "int64", "entity_ids": "int32", "topic_mask": "bool", "answer_mask": "bool",
                "edge_ptr": "int64", "edge_index": "int32", "edge_rel": "int32", "row_hash": "uint64"}
_GROWING = {"row_hash": "uint64", "entity_ids": "int32", "topic_mask": "bool", "answer_mask": "bool", "ent_count": "int64",
            "edge_head": "int32", "edge_tail": "int32", "edge_rel": "int32", "edge_count": "int64"}


class IndexBuildError(RuntimeError):
    pass


@contextlib.contextmanager
def build_lock(folder: Path) -> Iterator[None]:
    """Exclusive lock on ``.<name>.lock`` next to ``folder`` (held for the whole build)."""
    with file_lock(folder.parent / f".{folder.name}.lock"):
        yield


class _SplitWriter:
    """The growing files of one split (plus its questions file)."""

    def __init__(self, folder: Path, counts: dict | None = None) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.files = {name: AppendFile(folder / f"{name}.part", dtype, None if counts is None else counts[name])
                      for name, dtype in _GROWING.items()}
        qpath = folder / "questions.jsonl"
        if counts is None:
            self.questions = open(qpath, "wb")
        else:
            self.questions = open(qpath, "r+b")
            self.questions.truncate(counts["questions_bytes"])
            self.questions.seek(counts["questions_bytes"])
        self.num_questions = 0 if counts is None else counts["questions"]

    def counts(self) -> dict:
        return {**{name: f.count for name, f in self.files.items()},
                "questions_bytes": self.questions.tell(), "questions": self.num_questions}

    def append(self, batch: RowBatch, out: dict) -> None:
        for name in _GROWING:
            self.files[name].append(out[name])
        for qid, question, answers in zip(batch.ids, batch.questions, batch.answers):
            self.questions.write((json.dumps([qid, question, answers], ensure_ascii=False) + "\n").encode("utf-8"))
        self.num_questions += len(batch)

    def flush(self) -> None:
        for f in self.files.values():
            f.flush()
        self.questions.flush()

    def finish(self) -> dict:
        """Turn the growing files into the split's final arrays; returns their shapes."""
        self.flush()
        for f in self.files.values():
            f.close()
        self.questions.close()
        d = self.folder
        n_q = self.num_questions
        for count, ptr in (("ent_count", "ent_ptr"), ("edge_count", "edge_ptr")):
            counts = np.fromfile(d / f"{count}.part", dtype=np.int64)
            np.concatenate([np.zeros(1, np.int64), np.cumsum(counts)]).tofile(d / f"{ptr}.bin")
            (d / f"{count}.part").unlink()
        with open(d / "edge_index.bin", "wb") as out:  # [2, E]: all heads, then all tails
            for part in ("edge_head", "edge_tail"):
                with open(d / f"{part}.part", "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 24)
                (d / f"{part}.part").unlink()
        for name in ("entity_ids", "topic_mask", "answer_mask", "edge_rel", "row_hash"):
            os.replace(d / f"{name}.part", d / f"{name}.bin")
        n_nodes = self.files["entity_ids"].count
        n_edges = self.files["edge_rel"].count
        return {"ent_ptr": [n_q + 1], "entity_ids": [n_nodes], "topic_mask": [n_nodes], "answer_mask": [n_nodes],
                "edge_ptr": [n_q + 1], "edge_index": [2, n_edges], "edge_rel": [n_edges], "row_hash": [n_q]}


class _VocabWriter:
    """Appends the names an interner adds to ``<name>.offsets.bin`` / ``<name>.data.bin``."""

    def __init__(self, folder: Path, name: str, resume: dict | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.name = name
        off_path, data_path = folder / f"{name}.offsets.bin", folder / f"{name}.data.bin"
        if resume is None:
            self.offsets = AppendFile(off_path, np.int64)
            self.offsets.append(np.zeros(1, np.int64))
            self.data = AppendFile(data_path, np.uint8)
            self.interner = StringInterner()
        else:
            self.offsets = AppendFile(off_path, np.int64, resume["names"] + 1)
            self.data = AppendFile(data_path, np.uint8, resume["bytes"])
            offsets = np.fromfile(off_path, dtype=np.int64, count=resume["names"] + 1)
            data = np.fromfile(data_path, dtype=np.uint8, count=resume["bytes"])
            self.interner = StringInterner(offsets, data)
        self.written = len(self.interner)

    def sync(self) -> None:
        """Append the names interned since the last call."""
        n, b = len(self.interner), self.interner.num_bytes
        if n > self.written:
            self.offsets.append(self.interner.offsets[self.written + 1: n + 1])
            self.data.append(self.interner.data[self.data.count: b])
            self.written = n

    def state(self) -> dict:
        return {"names": len(self.interner), "bytes": self.interner.num_bytes}

    def finish(self, folder: Path) -> dict:
        """Close the files and write the lookup table; returns the files' shapes."""
        self.sync()
        self.offsets.close()
        self.data.close()
        it = self.interner
        n = len(it)
        it.table.tofile(folder / f"{self.name}.table.bin")
        it.hashes[:n].tofile(folder / f"{self.name}.hashes.bin")
        return {f"{self.name}.offsets": [n + 1], f"{self.name}.data": [it.num_bytes],
                f"{self.name}.table": [it.table.size], f"{self.name}.hashes": [n]}


def encode_batch(batch: RowBatch, ents: StringInterner, rels: StringInterner) -> tuple[dict, int]:
    """Global ids of a batch's names, then its local graphs (the arrays appended per batch)."""
    from gsr_train.arrays import string_buffers

    n_rows, n_trip = len(batch), batch.num_triples
    t_offs, t_data = string_buffers(batch.triples)
    q_offs, q_data = string_buffers(batch.topics)
    a_offs, a_data = string_buffers(batch.answer_entities)
    n_topics, n_answers = int(batch.topic_ptr[-1]), int(batch.answer_ptr[-1])
    ents.reserve(2 * n_trip + n_topics + n_answers,
                 int(t_offs[-1] - t_offs[0]) + int(q_offs[-1] - q_offs[0]) + int(a_offs[-1] - a_offs[0]))
    heads, tails = np.empty(n_trip, np.int64), np.empty(n_trip, np.int64)
    topics, answers = np.empty(n_topics, np.int64), np.empty(n_answers, np.int64)
    K.intern_rows(t_offs, t_data, batch.triple_ptr, q_offs, q_data, batch.topic_ptr, a_offs, a_data,
                  batch.answer_ptr, ents.table, ents.hashes, ents.offsets, ents.data, ents.state,
                  heads, tails, topics, answers)
    relations = rels.intern(batch.triples, stride=3, phase=1) if n_trip else np.zeros(0, np.int64)
    max_nodes = 2 * n_trip + n_topics + n_answers
    out = {"entity_ids": np.empty(max_nodes, np.int32), "topic_mask": np.empty(max_nodes, np.bool_),
           "answer_mask": np.empty(max_nodes, np.bool_), "ent_count": np.empty(n_rows, np.int64),
           "edge_head": np.empty(n_trip, np.int32), "edge_tail": np.empty(n_trip, np.int32),
           "edge_rel": np.empty(n_trip, np.int32), "edge_count": np.empty(n_rows, np.int64)}
    dups = K.encode_rows(batch.triple_ptr, heads, relations, tails, batch.topic_ptr, topics, batch.answer_ptr,
                         answers, out["entity_ids"], out["topic_mask"], out["answer_mask"], out["ent_count"],
                         out["edge_head"], out["edge_tail"], out["edge_rel"], out["edge_count"])
    if dups < 0:
        row = -dups - 1
        raise IndexBuildError(f"{batch.source}: row {batch.ids[row]!r}: field 'graph': more than "
                              f"{1 << K.LOCAL_BITS} distinct entities or relation ids in one graph")
    n_nodes, n_edges = int(out["ent_count"].sum()), int(out["edge_count"].sum())
    for name in ("entity_ids", "topic_mask", "answer_mask"):
        out[name] = out[name][:n_nodes]
    for name in ("edge_head", "edge_tail", "edge_rel"):
        out[name] = out[name][:n_edges]
    out["row_hash"] = row_fingerprints(batch, out)
    return out, int(dups)


_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9))


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser (uint64 arithmetic wraps, as it should here)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def row_fingerprints(batch: RowBatch, out: dict) -> np.ndarray:
    """One uint64 per row from its question, its answers, its topic and answer entities and the
    *set* of its triples (order and duplicates ignored): equal fingerprints in two splits mean
    the same example twice."""
    import hashlib

    text = np.fromiter((int.from_bytes(hashlib.blake2b(
        (q + "\x1f" + "\x1e".join(sorted(a))).encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
        for q, a in zip(batch.questions, batch.answers)), dtype=np.uint64, count=len(batch))
    node_start = np.concatenate([np.zeros(1, np.int64), np.cumsum(out["ent_count"])])[:-1]
    base = np.repeat(node_start, out["edge_count"])
    ids = out["entity_ids"].astype(np.uint64)
    with np.errstate(over="ignore"):
        edge = _mix64(ids[base + out["edge_head"]] * _MIX[0] ^ (out["edge_rel"].astype(np.uint64) + np.uint64(1))
                      * _MIX[1] ^ ids[base + out["edge_tail"]] * _MIX[2])
        total = np.concatenate([np.zeros(1, np.uint64), np.cumsum(edge, dtype=np.uint64)])
        ptr = np.concatenate([np.zeros(1, np.int64), np.cumsum(out["edge_count"])])
        graph = total[ptr[1:]] - total[ptr[:-1]]  # order-independent sum per row
        # topic and answer entities (as sets) are part of the example too
        role = out["topic_mask"].astype(np.uint64) + np.uint64(2) * out["answer_mask"].astype(np.uint64)
        node = np.where(role > 0, _mix64(ids * _MIX[2] + role), np.uint64(0))
        node_total = np.concatenate([np.zeros(1, np.uint64), np.cumsum(node, dtype=np.uint64)])
        nptr = np.concatenate([np.zeros(1, np.int64), np.cumsum(out["ent_count"])])
        marked = node_total[nptr[1:]] - node_total[nptr[:-1]]
        return _mix64(text ^ _mix64(graph) ^ _mix64(marked + _MIX[1]))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build_index_folder(source: str | Path, splits: Sequence[str], folder: str | Path, key: str = "",
                       skip_invalid: bool = False, batch_rows: int = 64, checkpoint_seconds: float = 5.0,
                       show_progress: bool | None = None, stop_after_batches: int | None = None) -> dict:
    """Build the index of ``source``'s ``splits`` into ``folder`` (resuming a killed build).

    Returns the build summary (also in ``meta.json``). ``stop_after_batches`` ends the build
    early after a checkpoint (tests use it to simulate a kill).
    """
    folder = Path(folder)
    sources = {split: SplitSource(source, split) for split in splits}  # missing splits fail here
    partial = folder.with_name(f".{folder.name}.partial")
    t0 = time.perf_counter()
    saved = _read_progress(partial, key, list(splits))
    if saved is None:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        saved = {"format": INDEX_FORMAT, "key": key, "splits": list(splits), "done": {}, "current": None,
                 "vocab": None, "seconds": 0.0}
    else:
        log.info("resuming the KG index build in %s (%d of %d splits done)", partial, len(saved["done"]),
                 len(splits))
    vocab_dir = partial / "vocab"
    vocabs = {name: _VocabWriter(vocab_dir, name, None if saved["vocab"] is None else saved["vocab"][name])
              for name in VOCABS}
    shapes: dict[str, list[int]] = {}
    for info in saved["done"].values():
        shapes.update(info["shapes"])
    batches_done = 0
    last_checkpoint = time.perf_counter()

    def checkpoint(current: dict | None) -> None:
        for v in vocabs.values():
            v.sync()
            v.offsets.flush()
            v.data.flush()
        saved["vocab"] = {name: v.state() for name, v in vocabs.items()}
        saved["current"] = current
        saved["seconds"] = round(base_seconds + time.perf_counter() - t0, 3)
        write_json(partial / PROGRESS_FILE, saved)

    base_seconds = float(saved.get("seconds", 0.0))
    for split in splits:
        if split in saved["done"]:
            continue
        src = sources[split]
        cur = saved["current"] if saved["current"] and saved["current"]["split"] == split else None
        writer = _SplitWriter(partial / split, None if cur is None else cur["counts"])
        report = SkipReport(counts=Counter(cur["skips"]["counts"]) if cur else Counter())
        if cur:
            report.examples, report.loaded = list(cur["skips"]["examples"]), int(cur["skips"]["loaded"])
        seen_ids = set(_question_ids(partial / split / "questions.jsonl")) if cur else set()
        dups = int(cur["dups"]) if cur else 0
        start = (int(cur["unit"]), int(cur["rows"])) if cur else (0, 0)
        total = src.num_rows()
        with progress(total or 0, f"KG index [{split}]", show_progress, threshold=2000,
                      done=report.loaded + report.skipped) as advance:
            read = report.loaded + report.skipped
            for unit, rows, batch in src.batches(batch_rows, skip_invalid, report, seen_ids, start):
                out, d = encode_batch(batch, vocabs["entities"].interner, vocabs["relations"].interner)
                writer.append(batch, out)
                dups += d
                batches_done += 1
                advance(report.loaded + report.skipped - read)
                read = report.loaded + report.skipped
                if time.perf_counter() - last_checkpoint >= checkpoint_seconds or (
                        stop_after_batches is not None and batches_done >= stop_after_batches):
                    writer.flush()
                    checkpoint({"split": split, "unit": unit, "rows": rows, "counts": writer.counts(),
                                "skips": {"counts": dict(report.counts), "examples": report.examples,
                                          "loaded": report.loaded}, "dups": dups})
                    last_checkpoint = time.perf_counter()
                    if stop_after_batches is not None and batches_done >= stop_after_batches:
                        return {"stopped": True}
        split_shapes = writer.finish()
        shapes.update({f"{split}/{k}": v for k, v in split_shapes.items()})
        if report.skipped:
            log.warning("%s[%s]: %s", source, split, report.summary())
        saved["done"][split] = {
            "skips": {"loaded": report.loaded, "skipped": dict(report.counts), "skip_examples": report.examples,
                      "duplicate_triples_dropped": dups},
            "shapes": {f"{split}/{k}": v for k, v in split_shapes.items()},
            "questions": writer.num_questions, "triples": split_shapes["edge_rel"][0],
        }
        log.info("%s[%s]: %s; %d duplicate triples dropped", source, split, report.summary(), dups)
        checkpoint(None)
    for name, v in vocabs.items():
        shapes.update({f"vocab/{k}": s for k, s in v.finish(vocab_dir).items()})
    return _finish(partial, folder, saved, shapes, vocabs, base_seconds + time.perf_counter() - t0)


def _finish(partial: Path, folder: Path, saved: dict, shapes: dict, vocabs: dict, seconds: float) -> dict:
    """Checksums, ``meta.json``, then the rename that publishes the folder."""
    files = {}
    for rel, shape in sorted(shapes.items()):
        name = rel.rsplit("/", 1)[-1]
        dtype = _dtype_of(name)
        path = partial / f"{rel}.bin"
        files[f"{rel}.bin"] = {"dtype": dtype, "shape": shape, "bytes": path.stat().st_size,
                               "check": file_check(path)}
    for split in saved["splits"]:
        path = partial / split / "questions.jsonl"
        files[f"{split}/questions.jsonl"] = {"bytes": path.stat().st_size, "check": file_check(path)}
    meta = {
        "format": INDEX_FORMAT, "key": saved["key"], "splits": saved["splits"], "files": files,
        "overlap": split_overlap(partial, saved["splits"]),
        "skips": {s: saved["done"][s]["skips"] for s in saved["splits"]},
        "num_entities": len(vocabs["entities"].interner), "num_relations": len(vocabs["relations"].interner),
        "entity_fingerprint": vocabs["entities"].interner.vocab().fingerprint(),
        "relation_fingerprint": vocabs["relations"].interner.vocab().fingerprint(),
        "questions": {s: saved["done"][s]["questions"] for s in saved["splits"]},
        "triples": {s: saved["done"][s]["triples"] for s in saved["splits"]},
        "build_seconds": round(seconds, 3), "build_peak_rss_mb": round(_peak_rss_mb(), 1),
    }
    write_json(partial / "meta.json", meta)
    (partial / PROGRESS_FILE).unlink()
    if folder.exists():
        old = folder.with_name(f".{folder.name}.old.{os.getpid()}")
        os.replace(folder, old)
        os.replace(partial, folder)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(partial, folder)
    return meta


def split_overlap(folder: Path, splits: Sequence[str], examples: int = 10) -> dict:
    """Question ids and whole rows found in two splits (train/test leakage), per split pair:
    ``{"ids": {"train|test": {"count", "examples"}}, "rows": {...}}`` (empty when clean)."""
    ids = {s: list(_question_ids(folder / s / "questions.jsonl")) for s in splits}
    hashes = {s: np.fromfile(folder / s / "row_hash.bin", dtype=np.uint64) for s in splits}
    found: dict = {"ids": {}, "rows": {}}
    for i, a in enumerate(splits):
        for b in splits[i + 1:]:
            common = sorted(set(ids[a]) & set(ids[b]))
            if common:
                found["ids"][f"{a}|{b}"] = {"count": len(common), "examples": common[:examples]}
            same, ia, ib = np.intersect1d(hashes[a], hashes[b], return_indices=True)
            if len(same):
                pairs = [f"{ids[a][x]} = {ids[b][y]}" for x, y in zip(ia[:examples], ib[:examples])]
                found["rows"][f"{a}|{b}"] = {"count": int(len(same)), "examples": pairs}
    return {k: v for k, v in found.items() if v}


def _dtype_of(name: str) -> str:
    if name in SPLIT_ARRAYS:
        return SPLIT_ARRAYS[name]
    kind = name.rsplit(".", 1)[-1]
    return {"offsets": "int64", "data": "uint8", "table": "int32", "hashes": "uint64"}[kind]


def _question_ids(path: Path) -> Iterator[str]:
    with open(path, "rb") as f:
        for line in f:
            yield json.loads(line)[0]


def _read_progress(partial: Path, key: str, splits: list[str]) -> dict | None:
    """The checkpoint of an interrupted build of the same inputs, or None."""
    try:
        saved = json.loads((partial / PROGRESS_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if saved.get("format") != INDEX_FORMAT or saved.get("key") != key or saved.get("splits") != splits:
        return None
    try:  # every recorded size must still be there
        for name, st in (saved.get("vocab") or {}).items():
            for kind, items, size in (("offsets", st["names"] + 1, 8), ("data", st["bytes"], 1)):
                if (partial / "vocab" / f"{name}.{kind}.bin").stat().st_size < items * size:
                    return None
        cur = saved.get("current")
        if cur:
            for name, dtype in _GROWING.items():
                if (partial / cur["split"] / f"{name}.part").stat().st_size < \
                        cur["counts"][name] * np.dtype(dtype).itemsize:
                    return None
    except (OSError, KeyError, TypeError):
        return None
    return saved
