"""String vocabularies kept as Arrow-style buffers: built by interning, read memory-mapped.

A KG vocabulary of RoG-CWQ has millions of entity names. As a Python ``list[str]`` plus a
``dict`` for lookups it would cost about 0.2 GB per million names in every process; here a
vocabulary is two flat arrays (``offsets`` int64, ``data`` UTF-8 bytes) plus an
open-addressing hash table (``table`` int32, ``hashes`` uint64), all memory-mapped from the
index folder, so DDP ranks share one copy and lookups cost no load time.

`StringVocab` is a read-only ``Sequence[str]`` (``vocab[i]``, ``len``, iteration,
``in``, ``==`` against a list) with vectorised ``lookup`` (names -> ids, -1 unknown) and
``take`` (ids -> names), and ``to_arrow()`` for zero-copy Arrow compute.
`StringInterner` builds one (see `gsr_train.kg.encode_kernels`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from gsr_train.arrays import string_buffers
from gsr_train.kg import encode_kernels as K

_MIN_TABLE = 1 << 10


def _table_size(count: int) -> int:
    """Power-of-two table size that keeps ``count`` names at most half full."""
    return max(_MIN_TABLE, 1 << int(2 * max(count, 1) - 1).bit_length())


def _as_strings(names: Iterable[str] | pa.Array) -> pa.Array:
    if isinstance(names, (pa.Array, pa.ChunkedArray)):
        return names
    return pa.array(list(names), pa.large_string())


class StringVocab(Sequence):
    """Read-only vocabulary over ``offsets`` / ``data`` (and optionally a hash table)."""

    def __init__(
        self, offsets: np.ndarray, data: np.ndarray, table: np.ndarray | None = None, hashes: np.ndarray | None = None
    ) -> None:
        self.offsets = offsets
        self.data = data
        self._table, self._hashes = table, hashes
        self._arrow: pa.Array | None = None

    # ------------------------------------------------------------ construction
    @classmethod
    def from_list(cls, names: Iterable[str]) -> StringVocab:
        """An in-memory vocabulary of distinct ``names`` (in that order)."""
        interner = StringInterner()
        arr = _as_strings(names)
        ids = interner.intern(arr)
        if ids.size and not np.array_equal(ids, np.arange(ids.size)):
            dup = int(np.flatnonzero(ids != np.arange(ids.size))[0])
            raise ValueError(f"vocabulary names must be distinct: {arr[dup].as_py()!r} appears twice")
        return interner.vocab()

    @classmethod
    def coerce(cls, names) -> StringVocab:
        return names if isinstance(names, StringVocab) else cls.from_list(names)

    # ------------------------------------------------------------ sequence protocol
    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    def _one(self, i: int) -> str:
        return bytes(self.data[self.offsets[i] : self.offsets[i + 1]]).decode("utf-8")

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.to_arrow()[i].to_pylist()
        i = int(i)
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"vocabulary id {i} out of range for {n} names")
        return self._one(i % n)

    def __iter__(self) -> Iterator[str]:
        arr = self.to_arrow()
        for start in range(0, len(arr), 65536):
            yield from arr[start : start + 65536].to_pylist()

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StringVocab):
            return (
                len(self) == len(other)
                and np.array_equal(self.offsets - self.offsets[0], other.offsets - other.offsets[0])
                and bytes(self.data[self.offsets[0] : self.offsets[-1]])
                == bytes(other.data[other.offsets[0] : other.offsets[-1]])
            )
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    # mutable-looking sequence semantics: not hashable (the usual idiom, which mypy does not accept)
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        head = ", ".join(repr(x) for x in self[:3])
        return f"StringVocab({len(self)} names: {head}{', ...' if len(self) > 3 else ''})"

    def index(self, name: str, *args) -> int:  # Sequence.index, in O(1)
        found = self.get(name)
        if found is None:
            raise ValueError(f"{name!r} is not in the vocabulary")
        return found

    # ------------------------------------------------------------ bulk access
    def to_arrow(self) -> pa.Array:
        """The names as an Arrow ``large_string`` array sharing this vocabulary's memory."""
        if self._arrow is None:
            n = len(self)
            self._arrow = pa.LargeStringArray.from_buffers(
                n,
                pa.py_buffer(np.ascontiguousarray(self.offsets, dtype=np.int64)),
                pa.py_buffer(self.data if self.data.size else np.zeros(1, np.uint8)),
            )
        return self._arrow

    def take(self, ids) -> list[str]:
        """Names of ``ids`` (any integer array-like)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            return []
        if int(ids.min()) < 0 or int(ids.max()) >= len(self):
            raise IndexError(f"vocabulary ids out of range [0, {len(self)})")
        return self.to_arrow().take(pa.array(ids)).to_pylist()

    def _lookup_table(self) -> tuple[np.ndarray, np.ndarray]:
        if self._table is None:
            n = len(self)
            hashes = np.empty(n, dtype=np.uint64)
            K.rehash_strings(np.ascontiguousarray(self.offsets, dtype=np.int64), self.data, n, hashes)
            table = np.full(_table_size(n), K.EMPTY, dtype=np.int32)
            K.rehash(hashes, n, table)
            self._table, self._hashes = table, hashes
            return table, hashes
        if self._hashes is None:
            raise ValueError("StringVocab: a lookup table was given without its hashes")
        return self._table, self._hashes

    def lookup(self, names: Iterable[str] | pa.Array) -> np.ndarray:
        """``int64`` id of every name, -1 for names not in the vocabulary."""
        arr = _as_strings(names)
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        out = np.empty(len(arr), dtype=np.int64)
        if len(arr) == 0:
            return out
        offs, data = string_buffers(arr)
        table, hashes = self._lookup_table()
        K.lookup(offs, data, table, hashes, np.ascontiguousarray(self.offsets, dtype=np.int64), self.data, out)
        if arr.null_count:
            out[np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)] = -1
        return out

    def get(self, name: str, default=None):
        found = int(self.lookup([name])[0])
        return default if found < 0 else found

    def mapping(self) -> NameIds:
        return NameIds(self)

    def fingerprint(self) -> str:
        """SHA-256 (16 hex digits) of the names in order; equal for equal vocabularies."""
        h = hashlib.sha256(f"vocab:{len(self)}\0".encode())
        h.update(np.ascontiguousarray(self.offsets - self.offsets[0], dtype=np.int64).tobytes())
        h.update(np.ascontiguousarray(self.data[self.offsets[0] : self.offsets[-1]]).data)  # a memoryview, no copy
        return h.hexdigest()[:16]

    @property
    def nbytes(self) -> int:
        parts = [self.offsets, self.data] + [x for x in (self._table, self._hashes) if x is not None]
        return int(sum(p.nbytes for p in parts))


class NameIds(Mapping):
    """``name -> id`` view of a `StringVocab` (what ``{name: i for ...}`` dicts were)."""

    def __init__(self, vocab: StringVocab) -> None:
        self.vocab = vocab

    def __getitem__(self, name: str) -> int:
        found = self.vocab.get(name) if isinstance(name, str) else None
        if found is None:
            raise KeyError(name)
        return found

    def get(self, name, default=None):
        found = self.vocab.get(name) if isinstance(name, str) else None
        return default if found is None else found

    def __contains__(self, name: object) -> bool:
        return name in self.vocab

    def __iter__(self) -> Iterator[str]:
        return iter(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)


class StringInterner:
    """Growing vocabulary: names get ids in order of first appearance (compiled, no Python
    string per name). ``state``: ``[names, bytes]``."""

    def __init__(
        self, offsets: np.ndarray | None = None, data: np.ndarray | None = None, table_size: int | None = None
    ) -> None:
        """Empty, or holding the saved names ``offsets`` / ``data`` (a resumed build), their lookup
        table ``table_size`` slots when given (the size it had when they were saved, so that it
        grows as it would have: a power of two that holds them; anything else is ignored)."""
        self.offsets = np.zeros(_MIN_TABLE + 1, dtype=np.int64)
        self.data = np.zeros(1 << 16, dtype=np.uint8)
        self.hashes = np.zeros(_MIN_TABLE, dtype=np.uint64)
        self.table = np.full(_MIN_TABLE * 2, K.EMPTY, dtype=np.int32)
        self.state = np.zeros(2, dtype=np.int64)
        if offsets is not None:  # resume from saved names
            if data is None:
                raise ValueError("saved names need both their offsets and their data")
            n, size = int(offsets.size - 1), int(offsets[-1] - offsets[0])
            self.reserve(n, size)
            self.offsets[: n + 1] = offsets - offsets[0]
            self.data[:size] = data[int(offsets[0]) : int(offsets[-1])]
            K.rehash_strings(self.offsets, self.data, n, self.hashes)
            if isinstance(table_size, int) and table_size > self.table.size and not table_size & (table_size - 1):
                self.table = np.full(table_size, K.EMPTY, dtype=np.int32)
            K.rehash(self.hashes, n, self.table)
            self.state[:] = (n, size)

    def __len__(self) -> int:
        return int(self.state[0])

    @property
    def num_bytes(self) -> int:
        return int(self.state[1])

    def reserve(self, new_names: int, new_bytes: int) -> None:
        """Room for ``new_names`` more names of ``new_bytes`` more bytes (grows geometrically)."""
        n, b = int(self.state[0]), int(self.state[1])
        if n + new_names + 1 > self.offsets.size:
            grown = np.zeros(max(int(self.offsets.size * 1.5), n + new_names + 1), dtype=np.int64)
            grown[: n + 1] = self.offsets[: n + 1]
            self.offsets = grown
            hashes = np.zeros(grown.size, dtype=np.uint64)
            hashes[:n] = self.hashes[:n]
            self.hashes = hashes
        if b + new_bytes > self.data.size:
            grown_data = np.zeros(max(int(self.data.size * 1.5), b + new_bytes), dtype=np.uint8)
            grown_data[:b] = self.data[:b]
            self.data = grown_data
        if 2 * (n + new_names) > self.table.size:
            self.table = np.full(_table_size(n + new_names), K.EMPTY, dtype=np.int32)
            K.rehash(self.hashes, n, self.table)

    def intern(self, arr: pa.Array, stride: int = 1, phase: int = 0) -> np.ndarray:
        """Ids of strings ``phase, phase + stride, ...`` of ``arr`` (new names appended)."""
        offs, data = string_buffers(arr)
        count = max(0, (len(arr) - phase + stride - 1) // stride)
        out = np.empty(count, dtype=np.int64)
        if count:
            self.reserve(count, int(offs[-1] - offs[0]))
            K.intern_strings(
                offs, data, stride, phase, count, self.table, self.hashes, self.offsets, self.data, self.state, out
            )
        return out

    def vocab(self) -> StringVocab:
        """A snapshot of the names so far (copies; the interner keeps growing)."""
        n, b = int(self.state[0]), int(self.state[1])
        table = self.table.copy() if 2 * n <= self.table.size else None
        return StringVocab(
            self.offsets[: n + 1].copy(),
            self.data[:b].copy(),
            table,
            self.hashes[:n].copy() if table is not None else None,
        )
