"""The nearest rows of a large embedding table (every entity or relation of a whole KG), through FAISS.

Below ``exact_below`` indexed rows the index is flat: every row compared, the true nearest found.
Above it a flat search costs about 0.07 us a row and a query on this project's 2-core machine
(``bench/bench_whole_kg.py``: 8 ms at 100k rows, 62 ms at 1M), so the index is an inverted file:
``4 sqrt(n)`` k-means lists of float16 vectors, ``nprobe`` of them searched (64: recall@16 0.94
against the exact index on the MiniLM vectors of webqsp_mini's 13,520 entity names; 16 gives 0.83,
128 gives 0.97). Either way ``oversample``
times ``k`` candidates are fetched and their distances recomputed exactly (float32, no matmul shortcut,
as the per-question search computes them), and the ``k`` kept are the nearest by (distance, row): the
same costs and the same tie order as `gsr_train.retrievers.simgrag.nearest_costs` over a graph.

The index is written once beside the embedding table it indexes (atomically, keyed by its settings)
and read back memory-mapped, so DDP ranks and later runs share it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gsr_train.io import file_lock, write_json
from gsr_train.text.embeddings import file_check

INDEX_VERSION = 1
_ADD_CHUNK = 1 << 16


@dataclass(frozen=True)
class VectorIndexOptions:
    exact_below: int = 100_000  # indexed rows up to which the index is flat (exact)
    nprobe: int = 64  # inverted lists searched per query (approximate index)
    oversample: int = 4  # candidates fetched per kept row, re-ranked exactly
    train_per_list: int = 40  # k-means training rows per list
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("nprobe", "oversample", "train_per_list"):
            if getattr(self, name) < 1:
                raise ValueError(f"vector index: {name} must be >= 1, got {getattr(self, name)}")


def exact_l2(queries: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``|rows[j] - queries[i]|`` in float32 without the matmul shortcut (identical vectors give 0)."""
    return torch.cdist(queries.float(), rows.float(), compute_mode="donot_use_mm_for_euclid_dist")


def _faiss():
    import faiss  # a compiled library: loaded when a whole-KG search is asked for

    return faiss


class VectorIndex:
    """Nearest rows of ``table`` among ``rows`` (the indexed row ids; default all), by L2 distance."""

    def __init__(
        self,
        table: torch.Tensor,
        rows: np.ndarray | None = None,
        options: VectorIndexOptions | None = None,
        folder: str | Path | None = None,
    ) -> None:
        self.table = table
        self.rows = np.arange(table.shape[0], dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
        self.options = options or VectorIndexOptions()
        self.exact = self.rows.size <= self.options.exact_below
        self.nlist = 0 if self.exact else max(1, int(4 * math.sqrt(self.rows.size)))
        self._index = self._load_or_build(Path(folder) if folder is not None else None) if self.rows.size else None

    @property
    def kind(self) -> str:
        return "exact" if self.exact else f"ivf{self.nlist}-fp16-nprobe{self.options.nprobe}"

    def _file_name(self) -> str:
        o = self.options
        settings = "flat" if self.exact else f"ivf{self.nlist}-t{o.train_per_list}-s{o.seed}"
        return f"faiss-v{INDEX_VERSION}-{settings}-{self.rows.size}-{_rows_digest(self.rows)}.index"

    def _load_or_build(self, folder: Path | None):
        faiss = _faiss()
        path = folder / self._file_name() if folder is not None else None
        if path is not None and _intact(path):
            try:  # memory-mapped: a truncated file would fault on first touch, hence the check above
                return faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
            except RuntimeError:
                pass  # damaged: built again below, replacing it
        index = self._build(faiss)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            faiss.write_index(index, str(tmp))
            check = {"bytes": tmp.stat().st_size, "check": file_check(tmp, sample=True)}
            with file_lock(path.with_name(path.name + ".lock")):  # the file and its check as one pair
                write_json(_check_path(path), check)
                os.replace(tmp, path)
        return index

    def _chunk(self, start: int, stop: int) -> np.ndarray:
        ids = torch.from_numpy(self.rows[start:stop])
        return np.ascontiguousarray(self.table[ids].float().numpy())

    def _build(self, faiss):
        dim = int(self.table.shape[1])
        if self.exact:
            index = faiss.IndexFlatL2(dim)
        else:
            o = self.options
            index = faiss.IndexIVFScalarQuantizer(
                faiss.IndexFlatL2(dim), dim, self.nlist, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_L2
            )
            rng = np.random.default_rng(o.seed)
            size = min(self.rows.size, self.nlist * o.train_per_list)
            sample = np.sort(rng.choice(self.rows.size, size, replace=False))
            index.train(np.ascontiguousarray(self.table[torch.from_numpy(self.rows[sample])].float().numpy()))
        for start in range(0, self.rows.size, _ADD_CHUNK):
            index.add(self._chunk(start, start + _ADD_CHUNK))
        return index

    def search(self, queries: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Per query, the ``k`` nearest indexed rows (table row ids, ``-1`` pads) and their exact
        distances (float64, ``inf`` pads), nearest first, ties by row id."""
        queries = queries.float().reshape(-1, self.table.shape[1])
        nq = queries.shape[0]
        ids = np.full((nq, k), -1, dtype=np.int64)
        dist = np.full((nq, k), math.inf)
        if self._index is None or nq == 0:
            return ids, dist
        if not self.exact:
            self._index.nprobe = self.options.nprobe
        fetch = min(self.rows.size, self.options.oversample * k)
        _, found = self._index.search(np.ascontiguousarray(queries.numpy()), fetch)
        for q in range(nq):
            pos = found[q][found[q] >= 0]
            cand = self.rows[pos]
            d = exact_l2(queries[q : q + 1], self.table[torch.from_numpy(cand)])[0].double().numpy()
            order = np.lexsort((cand, d))[:k]
            ids[q, : order.size], dist[q, : order.size] = cand[order], d[order]
        return ids, dist


def _check_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _intact(path: Path) -> bool:
    """The index file has the size and the sampled digest written beside it."""
    try:
        want = json.loads(_check_path(path).read_text())
        return path.stat().st_size == want["bytes"] and file_check(path, sample=True) == want["check"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _rows_digest(rows: np.ndarray) -> str:
    import hashlib

    return hashlib.blake2b(np.ascontiguousarray(rows).tobytes(), digest_size=8).hexdigest()
