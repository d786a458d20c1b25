"""Embedding store: every distinct text embedded once per encoder, memory-mapped from disk.

Text encoders are the slowest frozen stage of the pipeline (gte-large over a CWQ entity
vocabulary runs for hours), so their output is cached as float32 (or, with the encoder
option ``dtype: float16``, half the size) ``.npy`` tables, one per
text list (entity names, relation names, questions of a split, verbalised triples):

    cache_dir/embeddings/<encoder.key>/<input-hash>/{embeddings.npy, meta.json}

``input-hash`` covers the texts and which of them are encoded, so a changed dataset gets a
new table and an unchanged one is reused by every run. Loading is a memory map plus a
size / checksum check, so a warm cache costs well under a second.

Safety: a table is built in a ``.<hash>.partial`` folder, in chunks, with a progress
marker written every few seconds after flushing the chunks finished so far (and when the build
stops on an error or an interrupt); a killed run resumes from the marker, and only a
finished, checksummed table is swapped in (``atomic_dir``). A final table whose metadata
does not match its inputs, or whose file is truncated or altered, is rebuilt, never
trusted. A file lock keeps two processes from building the same table at once.

Entity names that are Freebase ids (``m.0abc``, ``g.11x``, raw or as an endpoint's IRIs) carry no
text: they are not sent to the encoder, their rows stay zero and ``entity_has_text`` is False for them.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from gsr_train.arrays import utf8_char_lengths
from gsr_train.data.errors import cache_write_error
from gsr_train.io import atomic_dir, file_digest, file_lock, write_json
from gsr_train.kg.index import KGIndex, default_cache_dir
from gsr_train.kg.vocab import StringVocab
from gsr_train.parallel import fork_pool, ordered_map, resolve_workers, shared
from gsr_train.progress import progress
from gsr_train.text.encoders import TextEncoder, load_encoder

log = logging.getLogger(__name__)

STORE_FORMAT = 1
MATRIX_FILE = "embeddings.npy"
META_FILE = "meta.json"
PROGRESS_FILE = "progress.json"
# Files up to this size get a full SHA-256 check on every load; bigger ones a size check
# plus a checksum of their first and last MiB (a full pass over GBs would dominate loading).
FULL_VERIFY_BYTES = 1 << 30
RELATION_TEXT_MODES = ("raw", "words")
STORAGE_DTYPES = {"float32": np.float32, "float16": np.float16}
# A build writes its progress marker (after flushing the rows) this often, and when it stops: a
# flush per chunk cost 10% of a hashing-encoder build, spent where workers cannot share it
CHECKPOINT_SECONDS = 5.0


class StaleEmbeddings(RuntimeError):
    """A cached table does not match its inputs or is damaged."""


@dataclass
class KGEmbeddings:
    """Frozen text embeddings of one KG index (tensors share memory with the cache files)."""

    entity: torch.Tensor  # [num_entities, d]; zero rows where entity_has_text is False
    entity_has_text: torch.Tensor  # [num_entities] bool
    relation: torch.Tensor  # [num_relations, d]
    question: dict[str, torch.Tensor]  # split -> [Q, d]
    dim: int
    encoder_name: str
    meta: dict = field(default_factory=dict)

    def __reduce_ex__(self, protocol):
        """Tables loaded from the cache pickle as their paths: a ``ddp_spawn`` rank maps the
        same files (shared pages) instead of receiving copies of GB-sized matrices."""
        paths = {kind: t.get("path") for kind, t in (self.meta.get("tables") or {}).items()}
        wanted = {"entity", "relation", *(f"question:{s}" for s in self.question)}
        if wanted <= set(paths) and all(p and Path(p).exists() for p in paths.values()):
            return _reopen_embeddings, (
                paths,
                sorted(self.question),
                self.entity_has_text,
                self.dim,
                self.encoder_name,
                self.meta,
            )
        return super().__reduce_ex__(protocol)


def _reopen_embeddings(paths: dict, splits: list, entity_has_text, dim, encoder_name, meta) -> KGEmbeddings:
    def table(kind: str) -> torch.Tensor:
        return torch.from_numpy(np.load(paths[kind], mmap_mode="c"))

    return KGEmbeddings(
        entity=table("entity"),
        entity_has_text=entity_has_text,
        relation=table("relation"),
        question={s: table(f"question:{s}") for s in splits},
        dim=dim,
        encoder_name=encoder_name,
        meta=meta,
    )


def relation_words(relation: str) -> str:
    """``people.person.place_of_birth`` -> ``people person place of birth``."""
    return re.sub(r"[._\s]+", " ", relation).strip()


def relation_texts(relations: Sequence[str], mode: str = "raw") -> list[str]:
    """Relation strings as sent to the encoder: the raw id (SubgraphRAG's choice) or words."""
    if mode == "raw":
        return list(relations)
    if mode == "words":
        return [relation_words(r) for r in relations]
    raise ValueError(f"relation_text must be one of {RELATION_TEXT_MODES}, got {mode!r}")


def texts_hash(texts: Sequence[str], encode_mask: np.ndarray | None = None) -> str:
    """Stable key of a text list and of which rows get encoded (NUL-separated SHA-256).

    A `gsr_train.kg.vocab.StringVocab` is hashed from its byte buffers in chunks
    (same key as the equal list of strings, without building millions of Python strings).
    """
    h = hashlib.sha256(f"texts:{len(texts)}\0".encode())
    if isinstance(texts, StringVocab):
        _hash_vocab(h, texts)
    else:
        for t in texts:
            h.update(t.encode("utf-8", "surrogatepass"))
            h.update(b"\0")
    if encode_mask is not None and not bool(np.all(encode_mask)):
        h.update(b"mask\0")
        h.update(np.packbits(np.asarray(encode_mask, dtype=bool)).tobytes())
    return h.hexdigest()[:24]


def _hash_vocab(h, vocab: StringVocab, chunk: int = 1 << 18) -> None:
    """Feed ``name\\0`` for every name of ``vocab`` into ``h``, ``chunk`` names at a time."""
    offsets, data = vocab.offsets, vocab.data
    for s in range(0, len(vocab), chunk):
        e = min(s + chunk, len(vocab))
        part = offsets[s : e + 1].astype(np.int64)
        block = np.asarray(data[part[0] : part[-1]], dtype=np.uint8)
        h.update(np.insert(block, part[1:] - part[0], 0).tobytes())


def file_check(path: Path, sample: bool) -> str:
    """The file's digest; ``sample``: of its first and last MiB and its size (a truncated or damaged
    file of GBs found without reading it all)."""
    if not sample:
        return file_digest(path)
    h = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        h.update(f.read(1 << 20))
    return "sample:" + h.hexdigest()


class EmbeddingTable:
    """One cached matrix: the embeddings of ``texts`` by ``encoder`` (rows in text order)."""

    def __init__(
        self,
        texts: Sequence[str],
        encoder: TextEncoder,
        cache_dir: str | Path,
        kind: str = "texts",
        encode_mask: Sequence[bool] | np.ndarray | None = None,
        dtype: str = "float32",
    ) -> None:
        if dtype not in STORAGE_DTYPES:
            raise ValueError(f"embedding dtype must be one of {sorted(STORAGE_DTYPES)}, got {dtype!r}")
        self.dtype = dtype
        # a StringVocab (entity names: millions) stays as its memory-mapped buffers
        self.texts = texts if isinstance(texts, StringVocab) else list(texts)
        self.encoder = encoder
        self.kind = kind
        self.mask = np.ones(len(self.texts), dtype=bool) if encode_mask is None else np.asarray(encode_mask, dtype=bool)
        if self.mask.shape != (len(self.texts),):
            raise ValueError(f"{kind}: encode_mask has shape {self.mask.shape}, expected ({len(self.texts)},)")
        self.input_hash = texts_hash(self.texts, self.mask)
        if dtype != "float32":  # a float16 table is another table (the float32 one stays valid)
            self.input_hash = f"{self.input_hash}-{dtype}"
        self.root = Path(cache_dir) / "embeddings" / encoder.key
        self.folder = self.root / self.input_hash
        self.partial = self.root / f".{self.input_hash}.partial"

    # ---------------------------------------------------------------- loading
    def expected_meta(self) -> dict[str, Any]:
        return {
            "format": STORE_FORMAT,
            "encoder_key": self.encoder.key,
            "input_hash": self.input_hash,
            "rows": len(self.texts),
            "dim": self.encoder.dim,
            "dtype": self.dtype,
        }

    def load(self) -> torch.Tensor:
        """The cached matrix as a copy-on-write memory map; `StaleEmbeddings` if unusable."""
        meta_path = self.folder / META_FILE
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise StaleEmbeddings(f"{meta_path}: unreadable ({e})") from e
        for k, v in self.expected_meta().items():
            if meta.get(k) != v:
                raise StaleEmbeddings(f"{meta_path}: {k}={meta.get(k)!r}, expected {v!r}")
        path = self.folder / MATRIX_FILE
        if not path.exists() or path.stat().st_size != meta.get("bytes"):
            raise StaleEmbeddings(f"{path}: missing or truncated (expected {meta.get('bytes')} bytes)")
        check = file_check(path, sample=meta["bytes"] > FULL_VERIFY_BYTES)
        if check != meta.get("checksum"):
            raise StaleEmbeddings(f"{path}: content does not match its checksum")
        try:
            # 'c' (copy-on-write) rather than 'r': torch wants a writable buffer, and writes
            # to the tensor stay in memory, never reaching the cache file.
            matrix = np.load(path, mmap_mode="c")
        except ValueError as e:
            raise StaleEmbeddings(f"{path}: cannot be read ({e})") from e
        if matrix.shape != (len(self.texts), self.encoder.dim) or matrix.dtype != STORAGE_DTYPES[self.dtype]:
            raise StaleEmbeddings(
                f"{path}: shape {matrix.shape} {matrix.dtype}, expected "
                f"({len(self.texts)}, {self.encoder.dim}) {self.dtype}"
            )
        return torch.from_numpy(matrix)

    def get(
        self, chunk_rows: int | None = None, progress: bool | None = None, workers: int | None = None
    ) -> torch.Tensor:
        """Load the table, building (or resuming, or rebuilding) it first when needed."""
        if self.folder.exists():
            try:
                return self.load()
            except StaleEmbeddings as e:
                log.warning("rebuilding %s embeddings: %s", self.kind, e)
        with file_lock(self.root / f".{self.input_hash}.lock"):
            if self.folder.exists():  # another process may have built it while we waited
                with contextlib.suppress(StaleEmbeddings):
                    return self.load()
            try:
                self.build(chunk_rows=chunk_rows, progress=progress, workers=workers)
            except OSError as e:  # a full disk or read-only cache: one line, not a traceback
                error = cache_write_error(e, self.root.parent.parent, f"the {self.kind} embeddings")
                if error is None:
                    raise
                raise error from e
        return self.load()

    # --------------------------------------------------------------- building
    def _plan(self) -> tuple[TextChunks, np.ndarray, np.ndarray]:
        """Distinct texts to encode (longest first), their first row, and each row's representative."""
        if isinstance(self.texts, StringVocab):  # names are distinct: no dictionary needed
            rows = np.flatnonzero(self.mask)
            # characters, not bytes: the same order, hence the same encoder batches, as a list of str
            lengths = utf8_char_lengths(self.texts.offsets, self.texts.data)[rows]
            rows = rows[np.argsort(-lengths, kind="stable")]
            return _Rows(self.texts, rows), rows, np.arange(len(self.texts))
        first: dict[str, int] = {}
        rep = np.arange(len(self.texts))
        for i in np.flatnonzero(self.mask).tolist():
            rep[i] = first.setdefault(self.texts[i], i)
        rows = np.fromiter(first.values(), dtype=np.int64, count=len(first))
        lengths = np.fromiter((len(t) for t in first), dtype=np.int64, count=len(first))
        order = np.argsort(-lengths, kind="stable")
        rows = rows[order]
        return [self.texts[i] for i in rows.tolist()], rows, rep

    def _open_partial(self, n_unique: int) -> tuple[np.memmap, int]:
        """The partial matrix and how many distinct texts it already holds (0 for a fresh one)."""
        marker = {**self.expected_meta(), "unique": n_unique}
        progress_path = self.partial / PROGRESS_FILE
        with contextlib.suppress(OSError, json.JSONDecodeError, ValueError, KeyError):
            saved = json.loads(progress_path.read_text())
            if all(saved.get(k) == v for k, v in marker.items()):
                reserve_space(self.partial / MATRIX_FILE)  # a sparse file from an older build
                matrix = np.lib.format.open_memmap(self.partial / MATRIX_FILE, mode="r+")
                if matrix.shape == (len(self.texts), self.encoder.dim) and matrix.dtype == STORAGE_DTYPES[self.dtype]:
                    done = int(saved["done"])
                    if 0 <= done <= n_unique:
                        log.info("resuming %s embeddings at %d/%d", self.kind, done, n_unique)
                        return matrix, done
        shutil.rmtree(self.partial, ignore_errors=True)
        self.partial.mkdir(parents=True)
        matrix = np.lib.format.open_memmap(
            self.partial / MATRIX_FILE,
            mode="w+",
            dtype=STORAGE_DTYPES[self.dtype],
            shape=(len(self.texts), self.encoder.dim),
        )
        try:
            reserve_space(self.partial / MATRIX_FILE)
        except OSError:
            del matrix
            shutil.rmtree(self.partial, ignore_errors=True)  # nothing encoded yet: give the space back
            raise
        write_json(progress_path, {**marker, "done": 0})
        return matrix, 0

    def build(self, chunk_rows: int | None = None, progress: bool | None = None, workers: int | None = None) -> None:
        """Encode the distinct texts chunk by chunk into the partial matrix, then swap it in.

        ``workers`` (``None``: `gsr_train.parallel.resolve_workers`) as the encoder says
        (`TextEncoder.parallel`): chunks in ``workers`` processes forked from this one, the
        model loaded once before the fork and shared, or one chunk at a time. Chunks are the same
        whatever the count, each encoded alike (a torch encoder on one intra-op thread, see
        `gsr_train.numerics`), and checkpointed in order, so the matrix is the same bytes
        for any count and a killed build resumes after its last checkpointed chunk with any count."""
        t0 = time.perf_counter()
        workers = resolve_workers(workers)
        unique, rows, rep = self._plan()
        matrix, done = self._open_partial(len(unique))
        marker = {**self.expected_meta(), "unique": len(unique)}
        chunk = int(chunk_rows or max(4 * int(getattr(self.encoder, "batch_size", 256)), 1024))
        spans = [(s, min(s + chunk, len(unique))) for s in range(done, len(unique), chunk)]
        mode = getattr(self.encoder, "parallel", "serial")
        # ``workers`` forked encoders; this process, which writes the progress marker, takes back the
        # chunks still queued while it waits (with workers - 1 children the one child went idle
        # while this process encoded: 12.1 s instead of 10.7 s at 20M rows on 2 cores)
        children = workers if mode == "processes" and workers > 1 and len(spans) > 1 else 0
        if children and spans:
            self.encoder.prepare()  # loaded once here, shared by the forked children
        written, last = done, time.perf_counter()

        def checkpoint(partial_matrix: np.memmap = matrix) -> None:
            """The rows so far to disk, then the marker saying so (a kill resumes from it)."""
            nonlocal last
            partial_matrix.flush()
            write_json(self.partial / PROGRESS_FILE, {**marker, "done": written})
            last = time.perf_counter()

        try:
            with (
                fork_pool(children, (self.encoder, unique, rows, matrix), _one_torch_thread) as pool,
                _progress(len(unique), done, progress, f"{self.encoder.name}: {self.kind}") as advance,
            ):
                for (s, e), shape in zip(spans, ordered_map(_encode_task, spans, pool, ahead=2 * workers)):
                    if shape != (e - s, self.encoder.dim):
                        raise ValueError(
                            f"encoder {self.encoder.name!r} returned shape {shape} "
                            f"for {e - s} texts (expected dim {self.encoder.dim})"
                        )
                    written = e
                    if time.perf_counter() - last >= CHECKPOINT_SECONDS:
                        checkpoint()
                    advance(e - s)
        finally:  # finished, failed or interrupted: what is written in order is kept
            if written > done:
                checkpoint()
        encoded = written - done
        dup = np.flatnonzero(rep != np.arange(len(rep)))
        if dup.size:
            matrix[dup] = matrix[rep[dup]]
        matrix.flush()
        del matrix
        path = self.partial / MATRIX_FILE
        size = path.stat().st_size
        meta = {
            **self.expected_meta(),
            "bytes": size,
            "checksum": file_check(path, size > FULL_VERIFY_BYTES),
            "kind": self.kind,
            "encoder": self.encoder.describe(),
            "unique_texts": len(unique),
            "encoded_rows": int(self.mask.sum()),
            "seconds": round(time.perf_counter() - t0, 3),
        }
        with atomic_dir(self.folder) as tmp:
            os.replace(path, tmp / MATRIX_FILE)
            write_json(tmp / META_FILE, meta)
        shutil.rmtree(self.partial, ignore_errors=True)
        log.info(
            "embedded %d %s texts with %s in %.1fs -> %s",
            encoded,
            self.kind,
            self.encoder.name,
            time.perf_counter() - t0,
            self.folder,
        )


def reserve_space(path: Path) -> None:
    """Allocate every block of ``path`` on its disk now. The matrix is written through a memory map,
    and a write into a mapped page the disk has no room for kills the process with SIGBUS (``Bus
    error``, exit 135, the run left marked running); allocated up front, a full disk is an
    ``OSError`` (ENOSPC) here, before any encoding. File systems without ``fallocate`` are left
    as they are."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
    except OSError as e:
        if e.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return
        raise OSError(e.errno, e.strerror, str(path)) from e
    finally:
        os.close(fd)


def _encode_task(span: tuple[int, int]) -> tuple[int, ...]:
    """Texts ``span`` of the table being built (the `fork_pool` data) encoded into its rows of
    the partial matrix (a shared file mapping: a forked process writes its rows in place, nothing
    comes back but the shape, checked before anything is written)."""
    encoder, texts, rows, matrix = shared()
    s, e = span
    vectors = encoder.encode(texts[s:e], progress=False).detach().to(torch.float32).cpu().numpy()
    if vectors.shape == (e - s, encoder.dim):
        matrix[rows[s:e]] = vectors.astype(matrix.dtype, copy=False)
    return tuple(vectors.shape)


def _one_torch_thread() -> None:
    """First thing in a forked encoding process: one torch thread (a thread pool inherited from the
    parent does not survive a fork; with one thread torch never enters it), as DataLoader workers do."""
    torch.set_num_threads(1)


class TextChunks(Protocol):
    """Texts to encode, read by length and by slices (a list of str, or `_Rows`)."""

    def __len__(self) -> int: ...

    def __getitem__(self, item: slice, /) -> Sequence[str]: ...


class _Rows:
    """``rows`` of a vocabulary as a lazily sliced sequence: ``[s:e]`` materialises only that chunk."""

    def __init__(self, vocab: StringVocab, rows: np.ndarray) -> None:
        self.vocab, self.rows = vocab, rows

    def __len__(self) -> int:
        return int(self.rows.size)

    def __getitem__(self, item: slice) -> list[str]:
        return self.vocab.take(self.rows[item])


def _progress(total: int, done: int, show: bool | None, description: str):
    """Rich progress over texts (shown for long jobs or when asked); yields an advance(n)."""
    return progress(total, description, show, threshold=2000, done=done)


def embed_texts(
    texts: Sequence[str],
    encoder: TextEncoder | str | Mapping,
    cache_dir: str | Path | None = None,
    kind: str = "texts",
    encode_mask: Sequence[bool] | np.ndarray | None = None,
    chunk_rows: int | None = None,
    progress: bool | None = None,
    workers: int | None = None,
) -> torch.Tensor:
    """Cached ``[len(texts), d]`` embeddings; rows where ``encode_mask`` is False are zero."""
    encoder = load_encoder(encoder)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return EmbeddingTable(texts, encoder, cache_dir, kind, encode_mask).get(chunk_rows, progress, workers)


def get_embeddings(
    index: KGIndex,
    encoder: TextEncoder | str | Mapping = "minilm",
    cache_dir: str | Path | None = None,
    relation_text: str | None = None,
    splits: Sequence[str] | None = None,
    progress: bool | None = None,
    workers: int | None = None,
) -> KGEmbeddings:
    """Entity, relation and question embeddings of ``index`` (built once, then memory-mapped).

    ``encoder`` is a `TextEncoder`, a name (``minilm``) or a config mapping
    (``{name: minilm, batch_size: 256, device: cpu}``). ``relation_text`` picks ``raw``
    Freebase ids (as SubgraphRAG embeds them) or ``words``. ``splits`` defaults to every
    split of the index. ``relation_text=None`` takes the encoder config's ``relation_text``,
    else ``raw``. ``workers``: see `EmbeddingTable.build` (not part of any cache key: the
    tables are the same bytes whatever the count).
    """
    t0 = time.perf_counter()
    if relation_text is None:
        relation_text = str(encoder.get("relation_text", "raw")) if hasattr(encoder, "get") else "raw"
    # storage dtype of the tables (encoder option ``dtype: float16`` halves them; rows are
    # widened to float32 where they are used)
    dtype = str(encoder.get("dtype", "float32") or "float32") if hasattr(encoder, "get") else "float32"
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"encoder option dtype must be one of {sorted(STORAGE_DTYPES)}, got {dtype!r}")
    encoder = load_encoder(encoder)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    splits = list(index.splits) if splits is None else list(splits)
    for split in splits:
        index[split]  # clear KeyError naming the available splits

    has = index.entity_has_text().numpy()
    tables = {
        "entity": EmbeddingTable(index.entities, encoder, cache_dir, "entity", has, dtype),
        "relation": EmbeddingTable(
            relation_texts(index.relations, relation_text), encoder, cache_dir, f"relation:{relation_text}", dtype=dtype
        ),
    }
    for split in splits:
        tables[f"question:{split}"] = EmbeddingTable(
            index[split].questions, encoder, cache_dir, f"question:{split}", dtype=dtype
        )
    matrices = {kind: table.get(progress=progress, workers=workers) for kind, table in tables.items()}
    meta = {
        **encoder.describe(),
        "relation_text": relation_text,
        "dtype": dtype,
        "cache_dir": str(cache_dir),
        "tables": {
            kind: {"input_hash": t.input_hash, "path": str(t.folder / MATRIX_FILE), "rows": len(t.texts)}
            for kind, t in tables.items()
        },
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return KGEmbeddings(
        entity=matrices["entity"],
        entity_has_text=torch.from_numpy(has.copy()),
        relation=matrices["relation"],
        question={split: matrices[f"question:{split}"] for split in splits},
        dim=encoder.dim,
        encoder_name=encoder.name,
        meta=meta,
    )
