"""Arrays on disk: append-only binary files while building, memory maps when reading.

Caches that hold one number per triple (the KG index, supervision labels) are written in
chunks as they are produced (`AppendFile`) and read back as memory maps
(`open_array`): opening costs no copy, the pages come from the OS page cache, and
processes that map the same file (DDP ranks on one node) share those pages.
`string_buffers` gives the numpy views of an Arrow string array that the compiled
kernels read.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from gsr_train.io import file_digest

# Files up to this size get a full SHA-256 on every load; bigger ones a checksum of 32
# evenly spread MiB-sized blocks (a full pass over GBs would dominate the load time).
FULL_CHECK_BYTES = 256 << 20
_SAMPLE_BLOCKS = 32
_BLOCK = 1 << 20


def string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, utf8 bytes)`` numpy views of an Arrow string array (no copy for
    ``string`` / ``large_string``; other string types are cast first)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    dtype: type[np.signedinteger]
    if pa.types.is_large_string(arr.type):
        dtype = np.int64
    elif pa.types.is_string(arr.type):
        dtype = np.int32
    else:
        arr, dtype = arr.cast(pa.large_string()), np.int64
    buffers = arr.buffers()
    if len(arr) == 0 or buffers[1] is None:
        return np.zeros(1, dtype=dtype), np.zeros(0, dtype=np.uint8)
    offsets = np.frombuffer(buffers[1], dtype=dtype)[arr.offset : arr.offset + len(arr) + 1]
    data = (
        np.frombuffer(buffers[2], dtype=np.uint8)
        if len(buffers) > 2 and buffers[2] is not None
        else np.zeros(0, dtype=np.uint8)
    )
    return offsets, data


class AppendFile:
    """A growing binary file of one dtype (``count`` items so far)."""

    def __init__(self, path: str | os.PathLike, dtype, resume_count: int | None = None) -> None:
        self.path, self.dtype = Path(path), np.dtype(dtype)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle: io.BufferedIOBase
        if resume_count is None:
            self.handle = open(self.path, "wb")
            self.count = 0
        else:
            size = resume_count * self.dtype.itemsize
            if not self.path.exists() or self.path.stat().st_size < size:
                raise FileNotFoundError(f"{self.path}: shorter than the {resume_count} items recorded")
            self.handle = open(self.path, "r+b")
            self.handle.truncate(size)
            self.handle.seek(size)
            self.count = resume_count

    def append(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        self.handle.write(values.data.cast("B"))  # the array's memoryview, no copy
        self.count += values.size

    def flush(self) -> None:
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


def open_array(path: str | os.PathLike, dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A copy-on-write memory map of a raw array file (pages shared until written; writes
    stay private, never reaching the file). Empty arrays come back as plain zeros."""
    dtype = np.dtype(dtype)
    if int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype=dtype)
    expected = int(np.prod(shape)) * dtype.itemsize
    size = Path(path).stat().st_size
    if size != expected:
        raise ValueError(f"{path}: {size} bytes, expected {expected} for {shape} {dtype}")
    return np.memmap(path, dtype=dtype, mode="c", shape=shape)


def file_check(path: str | os.PathLike) -> str:
    """Checksum of a cache file: full SHA-256 for files up to ``FULL_CHECK_BYTES``, else a
    SHA-256 of the size and 32 evenly spread 1 MiB blocks (``sample:`` prefix)."""
    size = Path(path).stat().st_size
    if size <= FULL_CHECK_BYTES:
        return file_digest(path)
    h = hashlib.sha256(str(size).encode())
    step = (size - _BLOCK) // (_SAMPLE_BLOCKS - 1)
    with open(path, "rb") as f:
        for k in range(_SAMPLE_BLOCKS):
            f.seek(k * step)
            h.update(f.read(_BLOCK))
    return "sample:" + h.hexdigest()


SCATTER_REDUCTIONS = ("sum", "mean", "min", "max")


def scatter(
    src: torch.Tensor, index: torch.Tensor, dim: int = 0, dim_size: int | None = None, reduce: str = "sum"
) -> torch.Tensor:
    """``src`` reduced into ``dim_size`` slots along ``dim`` by the 1-D ``index``: ``sum``, ``mean``
    (over the items a slot receives; an empty slot is 0), ``min`` or ``max`` (an empty slot is 0).

    The same torch kernels, in the same order, as ``torch_geometric.utils.scatter`` (without
    torch_scatter), so its results are the same bits (``tests/test_scatter.py`` holds them against
    PyG's). It lives here because importing PyG loads its datasets and LLM modules, pandas among
    them: two to four seconds at the start of every command that only needs a segment reduction."""
    if index.dim() != 1:
        raise ValueError(f"scatter: index must be one-dimensional (got {index.dim()} dimensions)")
    if reduce not in SCATTER_REDUCTIONS:
        raise ValueError(f"scatter: reduce={reduce!r}; one of {', '.join(SCATTER_REDUCTIONS)}")
    dim = src.dim() + dim if dim < 0 else dim
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() > 0 else 0
    size = src.size()[:dim] + (dim_size,) + src.size()[dim + 1 :]
    spread = _along(index, src, dim)
    if reduce in ("min", "max"):
        return src.new_zeros(size).scatter_reduce_(dim, spread, src, reduce=f"a{reduce}", include_self=False)
    out = src.new_zeros(size).scatter_add_(dim, spread, src)
    if reduce == "sum":
        return out
    count = src.new_zeros(dim_size).scatter_add_(0, index, src.new_ones(src.size(dim))).clamp(min=1)
    return out / _along(count, out, dim)


def _along(values: torch.Tensor, like: torch.Tensor, dim: int) -> torch.Tensor:
    """1-D ``values`` viewed along ``dim`` of ``like`` and expanded to its shape (no copy)."""
    shape = (1,) * dim + (-1,) + (1,) * (like.dim() - dim - 1)
    return values.view(shape).expand_as(like)


def segment_count(mask: torch.Tensor, ptr: torch.Tensor) -> torch.Tensor:
    """``[len(ptr) - 1]`` long: True items per CSR segment, from one cumulative sum.

    PyG's ``segment`` has no integer CPU kernel without torch_scatter and would need a float copy
    of the mask; a cumulative sum in int32 (half the memory traffic of int64) needs neither."""
    dtype = torch.int32 if mask.numel() < (1 << 31) else torch.long
    c = torch.zeros(mask.numel() + 1, dtype=dtype, device=mask.device)
    torch.cumsum(mask, 0, dtype=dtype, out=c[1:])
    return (c[ptr[1:]] - c[ptr[:-1]]).long()


def segment_sum(values: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """``[len(ptr) - 1]`` int64 sums of ``values[ptr[i]:ptr[i+1]]``, without an int64 copy of ``values``.

    ``np.add.reduceat`` reads the (memory-mapped, narrow) values in place; empty segments,
    which reduceat would fill with the next element, are set to 0. (PyG's ``segment`` would need
    a float copy of the whole array first.)
    """
    ptr = np.asarray(ptr, dtype=np.int64)
    values = np.asarray(values)
    if values.dtype == np.bool_:
        values = values.view(np.uint8)
    out = np.zeros(len(ptr) - 1, dtype=np.int64)
    sizes = np.diff(ptr)
    nonempty = np.flatnonzero(sizes > 0)
    if nonempty.size:
        out[nonempty] = np.add.reduceat(values[: ptr[-1]], ptr[:-1][nonempty], dtype=np.int64)
        # reduceat sums each start up to the next *given* start: correct, since the given
        # starts are exactly the non-empty segments, which are contiguous back to back
    return out


def utf8_char_lengths(offsets: np.ndarray, data: np.ndarray, chunk_bytes: int = 1 << 24) -> np.ndarray:
    """``[len(offsets) - 1]`` character counts of UTF-8 strings stored back to back (``data``
    bytes, ``offsets`` boundaries): bytes that do not continue a character, summed per string,
    a run of strings of about ``chunk_bytes`` at a time (the data may be a large memory map)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    out = np.zeros(max(n, 0), dtype=np.int64)
    start = 0
    while start < n:
        end = int(np.searchsorted(offsets, offsets[start] + chunk_bytes, side="right")) - 1
        end = min(max(end, start + 1), n)
        lo, hi = int(offsets[start]), int(offsets[end])
        starts_char = (np.asarray(data[lo:hi]) & 0xC0) != 0x80
        out[start:end] = segment_sum(starts_char, offsets[start : end + 1] - lo)
        start = end
    return out
