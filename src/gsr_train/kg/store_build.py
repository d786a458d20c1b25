"""``gsr-train import-kg``: KG files in, a whole-KG store (`gsr_train.kg.store`) out.

Streaming: files are read a batch at a time (`gsr_train.kg.triple_sources`), names interned by
the compiled kernels of the KG index (`gsr_train.kg.index_build.VocabWriter`) and each
batch's ids appended to their files in int32. What stays in memory is the vocabularies and one
batch; the adjacency is a counting sort over the memory-mapped columns at the end.

Like the index, the import runs in ``.<name>.partial/`` next to the store and checkpoints every few
seconds (files and vocabularies with their sizes and CRCs, the file and batch reached, how files are
cut into batches); a killed import resumes from its checkpoint (the batches before it read again,
cut as they were, not interned), and only
a finished store is renamed into place. A lock keeps two imports of one store apart. The store's
key is its files (path, size, modification time) and options: importing the same again is a
no-op, into a folder that holds another store is refused unless ``overwrite``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from gsr_train.arrays import AppendFile
from gsr_train.io import file_lock, stable_hash, write_json
from gsr_train.kg import store_kernels as SK
from gsr_train.kg.index_build import DamagedBuild, VocabWriter, peak_rss_mb
from gsr_train.kg.store import META_FILE, STORE_FORMAT, STORE_VERSION, KGStoreError, read_meta
from gsr_train.kg.triple_sources import (
    BadLines,
    Batch,
    Chunks,
    KGImportError,
    default_chunks,
    file_format,
    read_names,
    read_triples,
)

log = logging.getLogger(__name__)

PROGRESS_FILE = "progress.json"
CHECKPOINT_SECONDS = 5.0
MAX_IDS = 2**31 - 1  # int32 ids
COLUMNS = {
    "heads": np.int32,
    "rels": np.int32,
    "tails": np.int32,
    "named": np.int32,
    "name": np.int32,
    "alias": np.uint8,
}
VOCABS = ("entities", "relations", "names")
CHUNK = 1 << 24


def store_key(files: Sequence[Path], formats: Sequence[str], names: Path | None, skip_bad: bool, language: str) -> str:
    """What the store is made of: each file's path, size and modification time, and the options."""
    stat = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns, f) for p, f in zip(files, formats)]
    named = None if names is None else (str(names.resolve()), names.stat().st_size, names.stat().st_mtime_ns)
    return stable_hash(STORE_VERSION, stat, named, skip_bad, language)


def _check_inputs(
    files: Sequence[str | Path], fmt: str | None, names: str | Path | None
) -> tuple[list[Path], list[str]]:
    paths = [Path(f) for f in files]
    if not paths:
        raise KGImportError("import-kg: no KG file given")
    for path in [*paths, *([Path(names)] if names else [])]:
        if not path.is_file():
            raise KGImportError(f"{path}: no such file")
    return paths, [file_format(p, fmt) for p in paths]


class _Import:
    """One import in its partial folder: writers, counts, checkpoints."""

    def __init__(self, partial: Path, key: str, skip_bad: bool) -> None:
        self.partial, self.key, self.t0 = partial, key, time.perf_counter()
        self.bad = BadLines(skip_bad)
        self.attributes, self.position, self.resumed = 0, (0, 0), False
        self.chunks = default_chunks()
        saved = self._saved()
        try:
            if saved is None:
                raise DamagedBuild("no checkpoint")
            self.vocabs = {name: VocabWriter(partial, name, saved["vocabs"][name]) for name in VOCABS}
            self.files = {
                name: AppendFile(partial / f"{name}.raw", dtype, saved["counts"][name])
                for name, dtype in COLUMNS.items()
            }
            self.bad.counts.update(saved["bad"]["by_reason"])
            self.bad.first.update(saved["bad"]["first"])
            self.attributes, self.position, self.resumed = saved["attributes"], tuple(saved["position"]), True
            self.chunks = Chunks(**saved["chunks"])
            log.info("resuming the import at file %d, batch %d", *self.position)
        except (DamagedBuild, OSError, KeyError, TypeError) as e:
            if saved is not None:
                log.warning("starting the import again: %s", e)
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            self.vocabs = {name: VocabWriter(partial, name) for name in VOCABS}
            self.files = {name: AppendFile(partial / f"{name}.raw", dtype) for name, dtype in COLUMNS.items()}
        self.last = time.perf_counter()

    def _saved(self) -> dict | None:
        try:
            saved = json.loads((self.partial / PROGRESS_FILE).read_text())
        except (OSError, ValueError):
            return None
        return saved if saved.get("key") == self.key else None

    def add(self, batch: Batch) -> None:
        entities, relations = self.vocabs["entities"].interner, self.vocabs["relations"].interner
        n = len(batch.heads)
        if n:
            # heads and tails in row order: ids by first appearance in the file, whatever the batches
            both = pa.concat_arrays([batch.heads.cast(pa.large_string()), batch.tails.cast(pa.large_string())])
            ids = entities.intern(both.take(pa.array(np.stack([np.arange(n), np.arange(n) + n], axis=1).ravel())))
            self.files["heads"].append(ids[0::2])
            self.files["rels"].append(relations.intern(batch.relations))
            self.files["tails"].append(ids[1::2])
        if batch.named is not None and len(batch.named):
            self.files["named"].append(entities.intern(batch.named))
            self.files["name"].append(self.vocabs["names"].interner.intern(batch.names))
            alias = batch.alias if batch.alias is not None else np.zeros(len(batch.named), dtype=bool)
            self.files["alias"].append(alias.astype(np.uint8))
        self.attributes += batch.attributes
        if len(entities) > MAX_IDS or self.files["heads"].count > MAX_IDS:
            raise KGImportError(f"more than {MAX_IDS:,} entities or triples: split the KG into stores")

    def checkpoint(self, position: tuple[int, int], force: bool = False) -> None:
        """Everything so far to disk, then the record of it (a kill resumes from here)."""
        if not force and time.perf_counter() - self.last < CHECKPOINT_SECONDS:
            return
        for handle in self.files.values():
            handle.flush()
        for vocab in self.vocabs.values():
            vocab.sync()
            vocab.offsets.flush()
            vocab.data.flush()
        record = {
            "key": self.key,
            "position": list(position),
            "counts": {name: handle.count for name, handle in self.files.items()},
            "vocabs": {name: vocab.state() for name, vocab in self.vocabs.items()},
            "bad": self.bad.record(),
            "attributes": self.attributes,
            "chunks": asdict(self.chunks),
        }
        write_json(self.partial / PROGRESS_FILE, record)
        self.last = time.perf_counter()
        log.info("imported %s triples (%.0f s)", f"{self.files['heads'].count:,}", self.last - self.t0)


def _adjacency(keys: np.ndarray, num_nodes: int, folder: Path, name: str) -> dict:
    """``<name>_ptr`` / ``<name>_edge``: the edges of each node, by a counting sort of ``keys``."""
    counts = np.zeros(num_nodes, dtype=np.int64)
    for start in range(0, keys.size, CHUNK):
        SK.count_keys(keys[start : start + CHUNK], counts)
    ptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    ptr.tofile(folder / f"{name}_ptr.bin")
    del counts
    edges = np.memmap(folder / f"{name}_edge.bin", dtype=np.int32, mode="w+", shape=(max(keys.size, 1),))
    cursor = ptr[:-1].copy()
    for start in range(0, keys.size, CHUNK):
        SK.bucket_edges(keys[start : start + CHUNK], cursor, edges, start)
    edges.flush()
    del edges
    if keys.size == 0:
        os.truncate(folder / f"{name}_edge.bin", 0)
    return {f"{name}_ptr": ([num_nodes + 1], "int64"), f"{name}_edge": ([int(keys.size)], "int32")}


def _names_index(folder: Path, counts: dict, num_entities: int, num_names: int) -> dict:
    """``label`` (each entity's first non-alias name) and ``name_ptr`` / ``name_entity`` (the
    entities of each name, each once)."""
    named = np.fromfile(folder / "named.raw", dtype=np.int32, count=counts["named"]).astype(np.int64)
    name = np.fromfile(folder / "name.raw", dtype=np.int32, count=counts["name"]).astype(np.int64)
    alias = np.fromfile(folder / "alias.raw", dtype=np.uint8, count=counts["alias"]).astype(bool)
    label = np.full(num_entities, -1, dtype=np.int32)
    labels = np.flatnonzero(~alias)
    entity, first = np.unique(named[labels], return_index=True)
    label[entity] = name[labels[first]]
    label.tofile(folder / "label.bin")
    pairs = np.unique(name * max(num_entities, 1) + named)
    ptr = np.zeros(num_names + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs // max(num_entities, 1), minlength=num_names), out=ptr[1:])
    ptr.tofile(folder / "name_ptr.bin")
    (pairs % max(num_entities, 1)).astype(np.int32).tofile(folder / "name_entity.bin")
    return {
        "label": ([num_entities], "int32"),
        "name_ptr": ([num_names + 1], "int64"),
        "name_entity": ([int(pairs.size)], "int32"),
    }


def _finish(job: _Import, out: Path, sources: list[dict], options: dict) -> dict:
    """Vocabularies, columns, adjacency and names into their final files; ``meta.json``; the swap."""
    partial, counts = job.partial, {name: handle.count for name, handle in job.files.items()}
    for handle in job.files.values():
        handle.close()
    shapes: dict[str, Any] = {}
    for vocab in job.vocabs.values():
        for file, shape in vocab.finish(partial).items():
            dtype = {"offsets": "int64", "data": "uint8", "table": "int32", "hashes": "uint64"}[file.split(".")[1]]
            shapes[file] = (shape, dtype)
    for name in ("heads", "rels", "tails"):
        os.replace(partial / f"{name}.raw", partial / f"{name}.bin")
        shapes[name] = ([counts[name]], "int32")
    num_entities = len(job.vocabs["entities"].interner)
    for name, column in (("out", "heads"), ("in", "tails")):
        keys = (
            np.memmap(partial / f"{column}.bin", dtype=np.int32, mode="r") if counts[column] else np.zeros(0, np.int32)
        )
        shapes.update(_adjacency(np.asarray(keys), num_entities, partial, name))
        del keys
    shapes.update(_names_index(partial, counts, num_entities, len(job.vocabs["names"].interner)))
    meta = {
        "format": STORE_FORMAT,
        "version": STORE_VERSION,
        "key": job.key,
        "entities": num_entities,
        "relations": len(job.vocabs["relations"].interner),
        "triples": counts["heads"],
        "labelled_entities": int((np.fromfile(partial / "label.bin", dtype=np.int32) >= 0).sum()),
        "names": len(job.vocabs["names"].interner),
        "sources": sources,
        "options": options,
        "bad_lines": job.bad.record(),
        "attributes_left_out": job.attributes,
        "files": {name: {"shape": shape, "dtype": dtype} for name, (shape, dtype) in shapes.items()},
        "build": {
            "seconds": round(time.perf_counter() - job.t0, 2),
            "peak_rss_mb": round(peak_rss_mb(), 1),
            "resumed": job.resumed,
        },
    }
    for leftover in (*(f"{n}.raw" for n in ("named", "name", "alias")), PROGRESS_FILE):
        (partial / leftover).unlink(missing_ok=True)
    write_json(partial / META_FILE, meta)
    _swap(partial, out)
    return meta


def _swap(partial: Path, out: Path) -> None:
    """``partial`` becomes ``out``; an older store there is removed only after the swap."""
    old = out.parent / f".{out.name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        os.replace(out, old)
    os.replace(partial, out)
    shutil.rmtree(old, ignore_errors=True)


def import_kg(
    files: Sequence[str | Path],
    out: str | Path,
    fmt: str | None = None,
    names: str | Path | None = None,
    skip_bad: bool = False,
    language: str = "en",
    overwrite: bool = False,
) -> dict:
    """Import ``files`` (and a ``names`` file) into the store ``out``; its ``meta.json`` record."""
    paths, formats = _check_inputs(files, fmt, names)
    names_path = Path(names) if names else None
    out = Path(out)
    key = store_key(paths, formats, names_path, skip_bad, language)
    out.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(out.parent / f".{out.name}.lock"):
        if out.exists():
            try:
                meta = read_meta(out)
            except KGStoreError:
                meta = {}
            if meta.get("key") == key:
                log.info("%s already holds this KG (%s triples): nothing to do", out, f"{meta['triples']:,}")
                return {**meta, "action": "reused"}
            if not overwrite:
                raise KGImportError(
                    f"{out} already exists and holds something else: --overwrite replaces it, or choose another --out"
                )
        job = _Import(out.parent / f".{out.name}.partial", key, skip_bad)
        sources = [{"path": str(p), "format": f} for p, f in zip(paths, formats)]
        readers = [(p, f) for p, f in zip(paths, formats)] + ([(names_path, "names")] if names_path else [])
        for s, (path, kind) in enumerate(readers):
            if s < job.position[0]:
                continue  # imported before the kill
            if kind == "names":
                batches = read_names(path, job.bad, job.chunks)
            else:
                batches = read_triples(path, kind, job.bad, language, job.chunks)
            for b, batch in enumerate(batches):
                if s == job.position[0] and b < job.position[1]:
                    continue  # taken before the kill (cut as then: the checkpoint's chunks)
                job.add(batch)
                job.checkpoint((s, b + 1))
            job.checkpoint((s + 1, 0), force=True)
        if names_path:
            sources.append({"path": str(names_path), "format": "names"})
        meta = _finish(job, out, sources, {"skip_bad": skip_bad, "language": language})
        return {**meta, "action": "resumed" if job.resumed else "built"}
