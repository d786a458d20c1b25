"""Streaming build of the KG index folder: record batches in, CSR arrays on disk out.

Memory stays flat whatever the corpus size: rows are read a batch at a time
(`gsr_train.data.row_batches`), names are interned by compiled kernels over the Arrow
buffers (`gsr_train.kg.encode_kernels`), and every array is appended to its file as it
is produced, in the narrowest dtype that holds it (int32 ids, bool masks, int64 offsets).
What stays in memory is the vocabulary (bytes of the distinct names + its hash table) and
one batch.

The build runs in ``.<name>.partial/`` next to the final folder and checkpoints every few
seconds (file sizes and their CRC-32s, vocabulary size, the unit and row reached, skip
counts); a finished split records the checksums of its files. A killed build resumes from
its last checkpoint after checking what it resumes from: files are cut back to the recorded
sizes and compared with the recorded CRCs and checksums (a damaged vocabulary restarts the
build, a damaged split is rebuilt, both logged), the vocabulary is re-hashed from its files
and reading continues at the recorded row. Only a finished, checksummed folder is renamed
into place. A file lock keeps two processes from building the same index at once (the
second waits and then reuses the result).

Folder layout (every array a raw little-endian file; dtypes and shapes in ``meta.json``):

    meta.json                       format, key, files {bytes, dtype, shape, check}, skips, counts,
                                    build (resumed or not; splits reused / rebuilt)
    vocab/{entities,relations}.{offsets,data,table,hashes}.bin
    <split>/{ent_ptr,entity_ids,topic_mask,answer_mask,edge_ptr,edge_index,edge_rel}.bin
    <split>/row_hash.bin            uint64 fingerprint of each row (question, answers, set of triples)
    <split>/questions.jsonl         [id, question, answers] per question

``meta.json`` also records train/test leakage found while building (``overlap``: question
ids, or whole rows, present in two splits); `gsr_train.kg.index.get_index` refuses
such an index unless ``allow_overlap`` is set.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import resource
import shutil
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from gsr_train.arrays import AppendFile, file_check
from gsr_train.data.row_batches import RowBatch, SplitSource
from gsr_train.data.rows import SkipReport
from gsr_train.io import file_lock, write_json
from gsr_train.kg.encode_batches import BATCH_ARRAYS, IndexBuildError, encode_stream  # noqa: F401  (IndexBuildError re-exported)
from gsr_train.kg.vocab import StringInterner
from gsr_train.memory import trim_freed_memory
from gsr_train.parallel import resolve_workers
from gsr_train.progress import progress

log = logging.getLogger(__name__)

INDEX_FORMAT = 4  # 4: truncated files in the skip records, checksummed resume
PROGRESS_FILE = "progress.json"
VOCABS = ("entities", "relations")
# split arrays: name -> dtype (edge_index is [2, E]: heads then tails)
SPLIT_ARRAYS = {
    "ent_ptr": "int64",
    "entity_ids": "int32",
    "topic_mask": "bool",
    "answer_mask": "bool",
    "edge_ptr": "int64",
    "edge_index": "int32",
    "edge_rel": "int32",
    "row_hash": "uint64",
}
_GROWING = BATCH_ARRAYS


@contextlib.contextmanager
def build_lock(folder: Path) -> Iterator[None]:
    """Exclusive lock on ``.<name>.lock`` next to ``folder`` (held for the whole build)."""
    with file_lock(folder.parent / f".{folder.name}.lock"):
        yield


class DamagedBuild(Exception):
    """A file of an interrupted build that does not match what its progress record says."""


def _crc(values: np.ndarray, crc: int = 0) -> int:
    return zlib.crc32(np.ascontiguousarray(values).data.cast("B"), crc)  # the array's memoryview, no copy


def _prefix_crc(path: Path, nbytes: int) -> int:
    """CRC-32 of the first ``nbytes`` of ``path``; `DamagedBuild` when it is shorter."""
    crc, left = 0, nbytes
    try:
        with open(path, "rb") as f:
            while left:
                block = f.read(min(left, 1 << 24))
                if not block:
                    raise DamagedBuild(f"{path}: shorter than the {nbytes} bytes recorded")
                crc, left = zlib.crc32(block, crc), left - len(block)
    except OSError as e:
        raise DamagedBuild(f"{path}: {e.strerror or e}") from e
    return crc


class _SplitWriter:
    """The growing files of one split (plus its questions file), with a running CRC-32 of each
    so a resumed build can check the bytes it continues from."""

    def __init__(self, folder: Path, counts: dict | None = None) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.files = {
            name: AppendFile(folder / f"{name}.part", dtype, None if counts is None else counts[name])
            for name, dtype in _GROWING.items()
        }
        qpath = folder / "questions.jsonl"
        self.questions: io.BufferedIOBase
        if counts is None:
            self.questions = open(qpath, "wb")
        else:
            self.questions = open(qpath, "r+b")
            self.questions.truncate(counts["questions_bytes"])
            self.questions.seek(counts["questions_bytes"])
        self.num_questions = 0 if counts is None else counts["questions"]
        self.crc = {name: 0 for name in (*_GROWING, "questions")} if counts is None else dict(counts["crc"])

    def counts(self) -> dict:
        return {
            **{name: f.count for name, f in self.files.items()},
            "questions_bytes": self.questions.tell(),
            "questions": self.num_questions,
            "crc": dict(self.crc),
        }

    def append(self, batch: RowBatch, out: dict) -> None:
        for name, dtype in _GROWING.items():
            values = np.ascontiguousarray(out[name], dtype=dtype)
            self.files[name].append(values)
            self.crc[name] = _crc(values, self.crc[name])
        lines = b"".join(
            (json.dumps([qid, question, answers], ensure_ascii=False) + "\n").encode("utf-8")
            for qid, question, answers in zip(batch.ids, batch.questions, batch.answers)
        )
        self.questions.write(lines)
        self.crc["questions"] = zlib.crc32(lines, self.crc["questions"])
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
        return {
            "ent_ptr": [n_q + 1],
            "entity_ids": [n_nodes],
            "topic_mask": [n_nodes],
            "answer_mask": [n_nodes],
            "edge_ptr": [n_q + 1],
            "edge_index": [2, n_edges],
            "edge_rel": [n_edges],
            "row_hash": [n_q],
        }


def _check_current(partial: Path, cur: dict) -> None:
    """`DamagedBuild` unless the current split's files begin with the bytes checkpointed."""
    folder, counts = partial / cur["split"], cur["counts"]
    for name, dtype in _GROWING.items():
        if _prefix_crc(folder / f"{name}.part", counts[name] * np.dtype(dtype).itemsize) != counts["crc"][name]:
            raise DamagedBuild(f"{folder / name}.part: content does not match its checkpoint")
    if _prefix_crc(folder / "questions.jsonl", counts["questions_bytes"]) != counts["crc"]["questions"]:
        raise DamagedBuild(f"{folder / 'questions.jsonl'}: content does not match its checkpoint")


class VocabWriter:
    """Appends the names an interner adds to ``<name>.offsets.bin`` / ``<name>.data.bin``, with a
    running CRC-32 of both; resuming checks the files against the recorded sizes and CRCs."""

    def __init__(self, folder: Path, name: str, resume: dict | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.name = name
        off_path, data_path = folder / f"{name}.offsets.bin", folder / f"{name}.data.bin"
        if resume is None:
            self.offsets = AppendFile(off_path, np.int64)
            self.offsets.append(np.zeros(1, np.int64))
            self.data = AppendFile(data_path, np.uint8)
            self.interner = StringInterner()
            self.crc = {"offsets": _crc(np.zeros(1, np.int64)), "data": 0}
        else:
            try:
                self.offsets = AppendFile(off_path, np.int64, resume["names"] + 1)
                self.data = AppendFile(data_path, np.uint8, resume["bytes"])
            except (OSError, KeyError) as e:
                raise DamagedBuild(f"{folder / name}: {e}") from e
            offsets = np.fromfile(off_path, dtype=np.int64, count=resume["names"] + 1)
            data = np.fromfile(data_path, dtype=np.uint8, count=resume["bytes"])
            self.crc = {"offsets": _crc(offsets), "data": _crc(data)}
            if self.crc != resume.get("crc"):
                raise DamagedBuild(f"{folder / name}.{{offsets,data}}.bin: content does not match its checkpoint")
            # the lookup table at its checkpointed size: it then grows as in a build never killed,
            # and its file is the same bytes (older checkpoints without the size: the smallest)
            self.interner = StringInterner(offsets, data, table_size=resume.get("table"))
        self.written = len(self.interner)
        self.table_size = int(self.interner.table.size)  # the lookup table's size when ``written`` was

    def sync(self, upto: tuple[int, int] | None = None) -> None:
        """Append the names interned since the last call: all of them, or (``upto``: the names and
        the table size right after the last batch written) those of the batches written, when
        workers have interned the next batches' names already."""
        n, table = (len(self.interner), int(self.interner.table.size)) if upto is None else upto
        if n > self.written:
            b = int(self.interner.offsets[n])
            offsets = np.ascontiguousarray(self.interner.offsets[self.written + 1 : n + 1], dtype=np.int64)
            data = np.ascontiguousarray(self.interner.data[self.data.count : b], dtype=np.uint8)
            self.offsets.append(offsets)
            self.data.append(data)
            self.crc = {"offsets": _crc(offsets, self.crc["offsets"]), "data": _crc(data, self.crc["data"])}
            self.written = n
        self.table_size = table

    def state(self) -> dict:
        """What a checkpoint records: the names written, their bytes and CRCs, the table's size then."""
        return {"names": self.written, "bytes": self.data.count, "table": self.table_size, "crc": dict(self.crc)}

    def close(self) -> None:
        self.offsets.close()
        self.data.close()

    def finish(self, folder: Path) -> dict:
        """Close the files and write the lookup table; returns the files' shapes."""
        self.sync()
        self.close()
        it = self.interner
        n = len(it)
        it.table.tofile(folder / f"{self.name}.table.bin")
        it.hashes[:n].tofile(folder / f"{self.name}.hashes.bin")
        return {
            f"{self.name}.offsets": [n + 1],
            f"{self.name}.data": [it.num_bytes],
            f"{self.name}.table": [it.table.size],
            f"{self.name}.hashes": [n],
        }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build_index_folder(
    source: str | Path,
    splits: Sequence[str],
    folder: str | Path,
    key: str = "",
    skip_invalid: bool = False,
    batch_rows: int = 64,
    checkpoint_seconds: float = 5.0,
    show_progress: bool | None = None,
    stop_after_batches: int | None = None,
    workers: int | None = None,
) -> dict:
    """Build the index of ``source``'s ``splits`` into ``folder`` (resuming a killed build).

    Returns the build summary (also in ``meta.json``; its ``build`` entry says whether the build
    resumed and which splits it verified, reused or rebuilt). ``stop_after_batches`` ends the
    build early after a checkpoint (tests use it to simulate a kill). ``workers``: threads that
    encode batches side by side (`gsr_train.kg.encode_batches`; ``None``: the cores
    available); the files are the same bytes whatever the count, and a build killed with one
    count resumes with any other.
    """
    folder = Path(folder)
    workers = resolve_workers(workers)
    sources = {split: SplitSource(source, split) for split in splits}  # missing splits fail here
    build = _Build(
        folder.with_name(f".{folder.name}.partial"), key, list(splits), checkpoint_seconds, stop_after_batches
    )
    for split in build.order():
        if not build.run_split(source, split, sources[split], batch_rows, skip_invalid, show_progress, workers):
            return {"stopped": True}
    return build.finish(folder, workers)


class _Build:
    """One build in ``.<name>.partial/``: its progress record, vocabularies and clock.

    A resumed build trusts nothing it has not checked: the vocabularies and the current split
    against the CRC-32s of the last checkpoint, every finished split against the checksums
    written when it finished. What does not match is rebuilt (and logged), never used.
    """

    def __init__(
        self, partial: Path, key: str, splits: list[str], checkpoint_seconds: float, stop_after_batches: int | None
    ) -> None:
        self.partial, self.checkpoint_seconds, self.stop_after = partial, checkpoint_seconds, stop_after_batches
        self.t0 = self.last_checkpoint = time.perf_counter()
        self.batches_done = 0
        self.saved, self.vocabs, self.resume = _start(partial, key, splits)
        self.base_seconds = float(self.saved.get("seconds", 0.0))

    def order(self) -> list[str]:
        """Splits still to encode: the checkpointed one first (so rebuilding a damaged earlier split
        does not overwrite its checkpoint), then the rest in order. A rebuilt split adds no name to
        the vocabulary (all of its names are in it), so the ids come out as in one clean build."""
        cur = (self.saved.get("current") or {}).get("split")
        return [cur] * bool(cur) + [s for s in self.saved["splits"] if s not in self.saved["done"] and s != cur]

    def checkpoint(self, current: dict | None, vocab_at: dict | None = None) -> None:
        """Write the progress record; ``vocab_at``: per vocabulary, (names, table size) right after
        the last batch written (the vocabularies' state as one pass would have it there)."""
        for name, v in self.vocabs.items():
            v.sync(None if vocab_at is None else vocab_at[name])
            v.offsets.flush()
            v.data.flush()
        self.saved["vocab"] = {name: v.state() for name, v in self.vocabs.items()}
        self.saved["current"] = current
        self.saved["seconds"] = round(self.base_seconds + time.perf_counter() - self.t0, 3)
        write_json(self.partial / PROGRESS_FILE, self.saved)
        self.last_checkpoint = time.perf_counter()

    def run_split(
        self,
        source: str | Path,
        split: str,
        src: SplitSource,
        batch_rows: int,
        skip_invalid: bool,
        show_progress: bool | None,
        workers: int = 1,
    ) -> bool:
        """Encode one split (from its checkpoint, if any); False when stopped early (tests)."""
        saved = self.saved
        cur = saved["current"] if saved["current"] and saved["current"]["split"] == split else None
        writer = _SplitWriter(self.partial / split, None if cur is None else cur["counts"])
        report = _skip_report(cur)
        seen_ids = set(_question_ids(self.partial / split / "questions.jsonl")) if cur else set()
        dups = int(cur["dups"]) if cur else 0
        start = (int(cur["unit"]), int(cur["rows"])) if cur else (0, 0)
        with progress(
            src.num_rows() or 0,
            f"KG index [{split}]",
            show_progress,
            threshold=2000,
            done=report.loaded + report.skipped,
        ) as advance:
            read = report.loaded + report.skipped
            ents, rels = self.vocabs["entities"].interner, self.vocabs["relations"].interner
            reader = _read_ahead(src, batch_rows, skip_invalid, report, seen_ids, start)
            with contextlib.closing(encode_stream(reader, ents, rels, workers)) as stream:
                for (unit, rows, skips), batch, out, d, vocab_at in stream:
                    writer.append(batch, out)
                    if workers > 1:
                        trim_freed_memory()
                    dups += d
                    self.batches_done += 1
                    seen = skips["loaded"] + sum(skips["counts"].values())
                    advance(seen - read)
                    read = seen
                    stop = self.stop_after is not None and self.batches_done >= self.stop_after
                    if stop or time.perf_counter() - self.last_checkpoint >= self.checkpoint_seconds:
                        writer.flush()
                        self.checkpoint(
                            {
                                "split": split,
                                "unit": unit,
                                "rows": rows,
                                "counts": writer.counts(),
                                "skips": skips,
                                "dups": dups,
                            },
                            vocab_at,
                        )
                        if stop:
                            return False
        self.finish_split(source, split, writer, report, dups)
        return True

    def finish_split(self, source: str | Path, split: str, writer: _SplitWriter, report: SkipReport, dups: int) -> None:
        """Final arrays of the split, their checksums into the progress record, a checkpoint."""
        shapes = writer.finish()
        if report.skipped or report.truncated:
            log.warning("%s[%s]: %s", source, split, report.summary())
        self.saved["done"][split] = {
            "skips": {
                "loaded": report.loaded,
                "skipped": dict(report.counts),
                "skip_examples": report.examples,
                "truncated": list(report.truncated),
                "duplicate_triples_dropped": dups,
            },
            "shapes": {f"{split}/{k}": v for k, v in shapes.items()},
            "files": _split_checks(self.partial, split, shapes),
            "questions": writer.num_questions,
            "triples": shapes["edge_rel"][0],
        }
        log.info("%s[%s]: %s; %d duplicate triples dropped", source, split, report.summary(), dups)
        self.checkpoint(None)

    def finish(self, folder: Path, workers: int = 1) -> dict:
        shapes: dict[str, list[int]] = {}
        for info in self.saved["done"].values():
            shapes.update(info["shapes"])
        vocab_dir = self.partial / "vocab"
        for v in self.vocabs.values():
            shapes.update({f"vocab/{k}": s for k, s in v.finish(vocab_dir).items()})
        seconds = self.base_seconds + time.perf_counter() - self.t0
        return _finish(self.partial, folder, self.saved, shapes, self.vocabs, seconds, self.resume, workers)


def _skip_report(cur: dict | None) -> SkipReport:
    """The skip counts of a checkpointed split (an empty report for a fresh one)."""
    if not cur:
        return SkipReport()
    skips = cur["skips"]
    return SkipReport(
        counts=Counter(skips["counts"]),
        examples=list(skips["examples"]),
        loaded=int(skips["loaded"]),
        truncated=list(skips.get("truncated") or []),
    )


def _skips_record(report: SkipReport) -> dict:
    """The skip counts so far, as a copy (the report goes on counting)."""
    return {
        "counts": dict(report.counts),
        "examples": list(report.examples),
        "loaded": report.loaded,
        "truncated": [dict(t) for t in report.truncated],
    }


def _read_ahead(
    src: SplitSource,
    batch_rows: int,
    skip_invalid: bool,
    report: SkipReport,
    seen_ids: set[str],
    start: tuple[int, int],
) -> Iterator[tuple[tuple[int, int, dict], RowBatch]]:
    """The split's batches, each tagged with where the reader was and the skip counts just after
    reading it: with several workers the reader runs a few batches ahead of the batch written,
    and a checkpoint must record the counts of the rows written, not of the rows read."""
    for unit, rows, batch in src.batches(batch_rows, skip_invalid, report, seen_ids, start):
        yield (unit, rows, _skips_record(report)), batch


def _split_checks(partial: Path, split: str, shapes: dict) -> dict:
    """``{relative path: {bytes, check}}`` of a finished split's files (the checks meta.json keeps)."""
    names = [f"{split}/{name}.bin" for name in shapes] + [f"{split}/questions.jsonl"]
    return {rel: {"bytes": (partial / rel).stat().st_size, "check": file_check(partial / rel)} for rel in names}


def _start(partial: Path, key: str, splits: list[str]) -> tuple[dict, dict, dict]:
    """``(progress record, vocabulary writers, resume record)``: the verified state of a killed
    build of the same inputs, or a fresh start in an emptied ``partial``."""
    saved = _read_progress(partial, key, splits)
    resume: dict = {"resumed": False}
    if saved is not None:
        try:
            vocabs = _resume_vocabs(partial, saved["vocab"])
        except (DamagedBuild, KeyError, TypeError) as e:
            log.warning(
                "not resuming the KG index build in %s: vocabulary %s; building again from the start", partial, e
            )
            resume = {"resumed": False, "discarded": f"vocabulary: {e}"}
            saved = None
    if saved is None:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        saved = {
            "format": INDEX_FORMAT,
            "key": key,
            "splits": list(splits),
            "done": {},
            "current": None,
            "vocab": None,
            "seconds": 0.0,
        }
        return saved, {name: VocabWriter(partial / "vocab", name) for name in VOCABS}, resume
    rebuilt = _verify_resumed(partial, saved)
    log.info(
        "resuming the KG index build in %s: %d of %d splits done and verified%s",
        partial,
        len(saved["done"]),
        len(splits),
        f", continuing {saved['current']['split']!r} from its checkpoint" if saved["current"] else "",
    )
    return (
        saved,
        vocabs,
        {
            "resumed": True,
            "splits_reused": [s for s in splits if s in saved["done"]],
            "continued": saved["current"]["split"] if saved["current"] else None,
            "rebuilt": rebuilt,
        },
    )


def _resume_vocabs(partial: Path, states: dict) -> dict:
    """The vocabulary writers of a checkpoint, each checked against its recorded CRCs."""
    vocabs: dict = {}
    try:
        for name in VOCABS:
            vocabs[name] = VocabWriter(partial / "vocab", name, states[name])
    except BaseException:
        for v in vocabs.values():
            v.close()
        raise
    return vocabs


def _verify_resumed(partial: Path, saved: dict) -> dict[str, str]:
    """Drop from ``saved`` every finished split (and the current one) whose files do not match the
    checksums recorded for them, delete their files, and return ``{split: reason}``."""
    rebuilt = {}
    for split, info in list(saved["done"].items()):
        problem = _done_split_problem(partial, split, info)
        if problem:
            rebuilt[split] = problem
            del saved["done"][split]
    cur = saved.get("current")
    if cur and cur["split"] not in rebuilt:
        try:
            _check_current(partial, cur)
        except (DamagedBuild, KeyError, TypeError) as e:
            rebuilt[cur["split"]] = f"checkpoint {e}"
    if cur and cur["split"] in rebuilt:
        saved["current"] = None
    for split, problem in rebuilt.items():
        log.warning("resumed KG index build: %s; rebuilding split %r", problem, split)
        shutil.rmtree(partial / split, ignore_errors=True)
    return rebuilt


def _done_split_problem(partial: Path, split: str, info: dict) -> str | None:
    """Why a finished split cannot be reused (missing record, size or checksum), or None."""
    files = info.get("files") if isinstance(info, dict) else None
    if not files:
        return f"{partial / split}: no checksums recorded"
    for rel, want in files.items():
        path = partial / rel
        try:
            if path.stat().st_size != want["bytes"]:
                return f"{path}: {path.stat().st_size} bytes, {want['bytes']} recorded when the split finished"
            if file_check(path) != want["check"]:
                return f"{path}: content does not match the checksum recorded when the split finished"
        except OSError as e:
            return f"{path}: {e.strerror or e}"
    return None


def _finish(
    partial: Path,
    folder: Path,
    saved: dict,
    shapes: dict,
    vocabs: dict,
    seconds: float,
    resume: dict | None = None,
    workers: int = 1,
) -> dict:
    """Checksums, ``meta.json``, then the rename that publishes the folder. The checksums of the
    splits are the ones written (and, on resume, verified) when each split finished."""
    files = {}
    for split in saved["splits"]:
        files.update(saved["done"][split]["files"])
    for rel, shape in sorted(shapes.items()):
        name = rel.rsplit("/", 1)[-1]
        path = partial / f"{rel}.bin"
        check = files.get(f"{rel}.bin") or {"bytes": path.stat().st_size, "check": file_check(path)}
        files[f"{rel}.bin"] = {"dtype": _dtype_of(name), "shape": shape, **check}
    meta = {
        "format": INDEX_FORMAT,
        "key": saved["key"],
        "splits": saved["splits"],
        "files": dict(sorted(files.items())),
        "overlap": split_overlap(partial, saved["splits"]),
        "skips": {s: saved["done"][s]["skips"] for s in saved["splits"]},
        "num_entities": len(vocabs["entities"].interner),
        "num_relations": len(vocabs["relations"].interner),
        "entity_fingerprint": vocabs["entities"].interner.vocab().fingerprint(),
        "relation_fingerprint": vocabs["relations"].interner.vocab().fingerprint(),
        "questions": {s: saved["done"][s]["questions"] for s in saved["splits"]},
        "triples": {s: saved["done"][s]["triples"] for s in saved["splits"]},
        "build_seconds": round(seconds, 3),
        "build_peak_rss_mb": round(peak_rss_mb(), 1),
        "build_workers": workers,
        "build": resume or {"resumed": False},
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
        for b in splits[i + 1 :]:
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
    """The progress record of an interrupted build of the same inputs, or None (its files are
    checked against it by `_start`)."""
    try:
        saved = json.loads((partial / PROGRESS_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        log.warning("%s: unreadable (%s); building the KG index again from the start", partial / PROGRESS_FILE, e)
        return None
    if (
        not isinstance(saved, dict)
        or saved.get("format") != INDEX_FORMAT
        or saved.get("key") != key
        or saved.get("splits") != splits
        or not isinstance(saved.get("done"), dict)
    ):
        return None
    return saved
