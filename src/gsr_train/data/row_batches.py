"""RoG rows as a stream of validated columnar batches (Arrow), never the whole split at once.

The index builder reads full RoG-CWQ (2 GB of parquet, 11 GB as Arrow) through this module,
a few dozen questions at a time. Each `RowBatch` holds the batch's valid rows as
columns: question metadata as small Python lists, and every name of the graph, the topic
entities and the answer entities as flat Arrow string arrays with CSR row pointers, which the
compiled interner reads without making a Python string per name.

Sources: local parquet files and hub-style shards (``pyarrow.parquet`` record batches),
Arrow IPC files (``datasets`` caches), a Hugging Face dataset name (``datasets`` Arrow
table), and JSONL / JSONL.gz (parsed line by line). Validation is the one of
`gsr_train.data.rows.validate_row`, vectorised for Arrow input: a bad row raises
`gsr_train.data.rows.RowError` naming the file (the shard), the row id and the
field, or, with ``skip_invalid``, is dropped and counted per reason in a
`gsr_train.data.rows.SkipReport`. A file that cannot be read at all (a truncated
parquet shard) raises `gsr_train.data.rows.DataFileError` naming it; a truncated
JSONL.gz is an error at the line where it ends, or (``skip_invalid``) recorded as a truncated
file in the report: its rows up to the cut are kept, the rest is lost, never "1 skipped row".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gsr_train.data.arrow_files import arrow_batches, open_parquet  # noqa: F401  (re-exported)
from gsr_train.data.rows import (
    TRIPLE_REASON,
    DataFileError,
    RowError,
    SkipReport,
    SplitNotFoundError,
    is_truncation,
    split_files,
    validate_row,
)
from gsr_train.io import BadLine, file_digest, iter_jsonl

log = logging.getLogger(__name__)

REQUIRED = ("id", "question", "answer", "q_entity", "a_entity", "graph")


@dataclass
class RowBatch:
    """Valid rows of one batch, as columns (see the module docstring)."""

    source: str
    ids: list[str]
    questions: list[str]
    answers: list[list[str]]
    triples: pa.Array  # flat strings, 3 per triple (head, relation, tail)
    triple_ptr: np.ndarray  # [n + 1] int64: triples of row i are triple_ptr[i]:triple_ptr[i + 1]
    topics: pa.Array  # flat q_entity strings
    topic_ptr: np.ndarray
    answer_entities: pa.Array  # flat a_entity strings
    answer_ptr: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def num_triples(self) -> int:
        return int(self.triple_ptr[-1])


def _ptr(lengths: pa.Array) -> np.ndarray:
    counts = lengths.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return np.concatenate([np.zeros(1, np.int64), np.cumsum(counts)])


# ----------------------------------------------------------------------------- validation (Arrow)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_list(t: pa.DataType) -> bool:
    return (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    )


def _np(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(mask.fill_null(True).to_numpy(zero_copy_only=False), dtype=bool)


class _Checker:
    """Per-row problems of one Arrow batch: the first failing field of each row, in the
    order `validate_row` checks them (so both readers report the same error)."""

    def __init__(self, batch: pa.RecordBatch, source: str, position0: int) -> None:
        self.batch, self.source, self.position0 = batch, source, position0
        self.n = batch.num_rows
        self.bad = np.zeros(self.n, dtype=bool)
        self.problem: list[tuple[int, str, str, str]] = []  # (row, field, reason, category) in field order
        ids = batch.column("id") if "id" in batch.schema.names else None
        self.ids: list[Any] = ids.to_pylist() if ids is not None and _is_string(ids.type) else [None] * self.n

    def row_id(self, row: int) -> str:
        rid = self.ids[row]
        return rid if isinstance(rid, str) and rid else f"#{self.position0 + row}"

    def flag(self, mask: np.ndarray, field: str, reason, category: str | None = None) -> None:
        """Rows of ``mask`` fail ``field`` (unless an earlier field failed them already);
        ``reason``: a string, or ``row -> string`` for row-specific detail."""
        new = np.flatnonzero(mask & ~self.bad)
        if new.size == 0:
            return
        self.bad[new] = True
        for row in new.tolist():
            text = reason(row) if callable(reason) else reason
            self.problem.append((row, field, text, category or (reason if isinstance(reason, str) else field)))

    def column(self, name: str) -> pa.Array | None:
        return self.batch.column(name) if name in self.batch.schema.names else None

    def errors(self) -> list[tuple[int, RowError]]:
        return [
            (row, RowError(self.source, self.row_id(row), field, reason, category))
            for row, field, reason, category in self.problem
        ]


def _check_string_list(chk: _Checker, name: str, allow_empty: bool = True) -> None:
    col = chk.column(name)
    everyone = np.ones(chk.n, dtype=bool)
    if col is None or pa.types.is_null(col.type):
        chk.flag(everyone, name, "missing")
        return
    if not _is_list(col.type) or not _is_string(col.type.value_type):
        chk.flag(everyone, name, f"expected a list of strings, got {col.type}", "expected a list of strings")
        return
    chk.flag(_np(col.is_null()), name, "missing")
    values = col.flatten()
    if values.null_count:
        parents = pc.list_parent_indices(col).to_numpy(zero_copy_only=False)
        rows = np.zeros(chk.n, dtype=bool)
        rows[parents[_np(values.is_null())]] = True
        chk.flag(rows, name, "expected strings, found NoneType None")
    if not allow_empty:
        chk.flag(_np(pc.equal(pc.list_value_length(col), 0)), name, "empty")


def _check_graph(chk: _Checker) -> None:
    col = chk.column("graph")
    everyone = np.ones(chk.n, dtype=bool)
    if col is None or pa.types.is_null(col.type):
        chk.flag(everyone, "graph", "missing")
        return
    if not (_is_list(col.type) and _is_list(col.type.value_type) and _is_string(col.type.value_type.value_type)):
        chk.flag(
            everyone,
            "graph",
            f"expected a list of [head, relation, tail] string lists, got {col.type}",
            "expected a list of triples",
        )
        return
    chk.flag(_np(col.is_null()), "graph", "missing")
    triples = col.flatten()
    if len(triples) == 0:
        return
    bad_triple = _np(pc.not_equal(pc.list_value_length(triples), 3))  # null triples count as bad
    values = triples.flatten()
    bad_value = _np(values.is_null()) | (pc.utf8_length(values).fill_null(0).to_numpy(zero_copy_only=False) == 0)
    if bad_value.any():
        owner = pc.list_parent_indices(triples).to_numpy(zero_copy_only=False)
        bad_triple[owner[bad_value]] = True
    if not bad_triple.any():
        return
    row_of_triple = pc.list_parent_indices(col).to_numpy(zero_copy_only=False)
    first_triple = _ptr(pc.list_value_length(col))
    first_bad: dict[int, int] = {}
    for j in np.flatnonzero(bad_triple).tolist():
        first_bad.setdefault(int(row_of_triple[j]), j)
    rows = np.zeros(chk.n, dtype=bool)
    rows[list(first_bad)] = True

    def reason(row: int) -> str:
        j = first_bad[row]
        return f"triple #{j - int(first_triple[row])} is not three non-empty strings: {triples[j].as_py()!r}"

    chk.flag(rows, "graph", reason, TRIPLE_REASON)


def check_arrow_batch(
    batch: pa.RecordBatch, source: str, position0: int
) -> tuple[np.ndarray, list[tuple[int, RowError]]]:
    """``(good row mask, [(row, error)] of the bad rows)`` of one Arrow batch."""
    chk = _Checker(batch, source, position0)
    ids = chk.column("id")
    if ids is None or not _is_string(ids.type):
        chk.flag(np.ones(chk.n, dtype=bool), "id", "missing or not a non-empty string")
    else:
        chk.flag(
            _np(ids.is_null()) | (pc.utf8_length(ids).fill_null(0).to_numpy(zero_copy_only=False) == 0),
            "id",
            "missing or not a non-empty string",
        )
    question = chk.column("question")
    if question is None or not _is_string(question.type):
        chk.flag(np.ones(chk.n, dtype=bool), "question", "missing or empty")
    else:
        stripped = pc.utf8_length(pc.utf8_trim_whitespace(question)).fill_null(0).to_numpy(zero_copy_only=False)
        chk.flag(_np(question.is_null()) | (stripped == 0), "question", "missing or empty")
    _check_string_list(chk, "answer")
    _check_string_list(chk, "q_entity", allow_empty=False)
    _check_string_list(chk, "a_entity")
    _check_graph(chk)
    choices = chk.column("choices")
    if choices is not None and not pa.types.is_null(choices.type) and not _is_list(choices.type):
        chk.flag(~_np(choices.is_null()), "choices", f"expected a list, got {choices.type}", "expected a list")
    return ~chk.bad, chk.errors()


def _from_arrow(batch: pa.RecordBatch, source: str) -> RowBatch:
    graph, q_ent, a_ent = batch.column("graph"), batch.column("q_entity"), batch.column("a_entity")
    return RowBatch(
        source=source,
        ids=batch.column("id").to_pylist(),
        questions=batch.column("question").to_pylist(),
        answers=batch.column("answer").to_pylist(),
        triples=graph.flatten().flatten(),
        triple_ptr=_ptr(pc.list_value_length(graph)),
        topics=q_ent.flatten(),
        topic_ptr=_ptr(pc.list_value_length(q_ent)),
        answer_entities=a_ent.flatten(),
        answer_ptr=_ptr(pc.list_value_length(a_ent)),
    )


def _from_rows(rows: Sequence, source: str) -> RowBatch:
    def ptr(lengths: list[int]) -> np.ndarray:
        return np.concatenate([np.zeros(1, np.int64), np.cumsum(np.asarray(lengths, dtype=np.int64))])

    return RowBatch(
        source=source,
        ids=[r.id for r in rows],
        questions=[r.question for r in rows],
        answers=[list(r.answer) for r in rows],
        triples=pa.array([x for r in rows for t in r.graph for x in t], pa.string()),
        triple_ptr=ptr([len(r.graph) for r in rows]),
        topics=pa.array([e for r in rows for e in r.q_entity], pa.string()),
        topic_ptr=ptr([len(r.q_entity) for r in rows]),
        answer_entities=pa.array([e for r in rows for e in r.a_entity], pa.string()),
        answer_ptr=ptr([len(r.a_entity) for r in rows]),
    )


# ----------------------------------------------------------------------------- sources


def _rebatch(batches: Iterator[pa.RecordBatch], rows: int, skip: int) -> Iterator[pa.RecordBatch]:
    """Record batches of at most ``rows`` rows, the first ``skip`` rows left out."""
    for batch in batches:
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        if skip:
            batch, skip = batch.slice(skip), 0
        for start in range(0, batch.num_rows, rows):
            yield batch.slice(start, rows)


class SplitSource:
    """Where one split's rows come from: local files (in order) or a hub dataset."""

    def __init__(self, source: str | Path, split: str) -> None:
        self.source, self.split = str(source), split
        path = Path(source)
        if path.is_dir():
            self.files: list[Path] | None = split_files(path, split)
        elif path.is_file():
            self.files = [path]
        else:
            self.files = None  # a hub dataset name; resolved by ``datasets`` when read
        self._hub = None

    @property
    def units(self) -> list[str]:
        """Names of the resumable units (files, or the one hub split)."""
        return [str(f) for f in self.files] if self.files is not None else [f"{self.source}[{self.split}]"]

    def hub_dataset(self):
        if self._hub is None:
            import datasets  # lazy: datasets (pyarrow + fsspec) is only needed by the hub-dataset path

            try:
                self._hub = datasets.load_dataset(self.source, split=self.split)
            except Exception as e:
                raise SplitNotFoundError(
                    f"{self.source!r} is neither a local folder/file nor a loadable Hugging Face dataset "
                    f"(split {self.split!r}): {e}. Offline? Point data.dir at a local folder of RoG-format "
                    "splits instead."
                ) from e
        return self._hub

    def fingerprint(self) -> str:
        """What identifies the split's content: the digests of its files in order, or the
        hub dataset's fingerprint."""
        if self.files is None:
            return f"hub:{self.source}:{self.hub_dataset()._fingerprint}"
        digests = [file_digest(f) for f in self.files]
        return digests[0] if len(digests) == 1 else "+".join(digests)

    def num_rows(self) -> int | None:
        """Rows in the split when the format says so cheaply (parquet, Arrow, hub), else None."""
        if self.files is None:
            return len(self.hub_dataset())
        total = 0
        for f in self.files:
            if f.suffix == ".parquet":
                total += open_parquet(f).metadata.num_rows
            elif f.suffix == ".arrow":
                total += sum(b.num_rows for b in arrow_batches(f))
            else:
                return None
        return total

    def batches(
        self,
        batch_rows: int = 64,
        skip_invalid: bool = False,
        report: SkipReport | None = None,
        seen_ids: set[str] | None = None,
        start: tuple[int, int] = (0, 0),
    ) -> Iterator[tuple[int, int, RowBatch]]:
        """``(unit, rows of the unit read so far, batch)`` from unit/row ``start`` on.

        ``seen_ids``: ids of the split read so far (a repeated id is an error or a skip);
        ``report``: where skips are counted.
        """
        report = report if report is not None else SkipReport()
        seen_ids = seen_ids if seen_ids is not None else set()
        for unit, name in enumerate(self.units):
            if unit < start[0]:
                continue
            skip = start[1] if unit == start[0] else 0
            if self.files is None:
                table = self.hub_dataset().data.table
                raw = _rebatch(iter(table.to_batches(max_chunksize=batch_rows)), batch_rows, skip)
                yield from self._arrow(unit, name, raw, skip, skip_invalid, report, seen_ids)
            elif self.files[unit].suffix == ".parquet":
                yield from self._arrow(
                    unit, name, self._parquet(self.files[unit], batch_rows, skip), skip, skip_invalid, report, seen_ids
                )
            elif self.files[unit].suffix == ".arrow":
                raw = _rebatch(arrow_batches(self.files[unit]), batch_rows, skip)
                yield from self._arrow(unit, name, raw, skip, skip_invalid, report, seen_ids)
            else:
                yield from self._jsonl(unit, self.files[unit], batch_rows, skip, skip_invalid, report, seen_ids)

    @staticmethod
    def _parquet(path: Path, batch_rows: int, skip: int) -> Iterator[pa.RecordBatch]:
        pf = open_parquet(path)
        meta = pf.metadata
        group, before = 0, 0
        while group < meta.num_row_groups and before + meta.row_group(group).num_rows <= skip:
            before += meta.row_group(group).num_rows
            group += 1
        columns = [c for c in (*REQUIRED, "choices") if c in pf.schema_arrow.names] or None
        read = before
        try:
            raw = pf.iter_batches(
                batch_size=batch_rows, row_groups=range(group, meta.num_row_groups), columns=columns, use_threads=False
            )
            for batch in _rebatch(raw, batch_rows, skip - before):
                read += batch.num_rows
                yield batch
        except (pa.ArrowException, OSError) as e:
            raise DataFileError(f"{path}: cannot be read after row {read}; it may be truncated or damaged ({e})") from e

    @staticmethod
    def _arrow(
        unit: int,
        name: str,
        raw: Iterator[pa.RecordBatch],
        skip: int,
        skip_invalid: bool,
        report: SkipReport,
        seen_ids: set[str],
    ) -> Iterator[tuple[int, int, RowBatch]]:
        position = skip
        for batch in raw:
            good, errors = check_arrow_batch(batch, name, position + 1)
            ids = batch.column("id").to_pylist() if "id" in batch.schema.names else []
            for row in np.flatnonzero(good).tolist():  # repeated ids (within and across batches)
                rid = ids[row]
                if rid in seen_ids:
                    errors.append((row, RowError(name, rid, "id", "duplicate id")))
                    good[row] = False
                else:
                    seen_ids.add(rid)
            if errors:
                errors.sort(key=lambda e: e[0])
                if not skip_invalid:
                    raise errors[0][1]
                for _, err in errors:
                    report.add(err)
                batch = batch.filter(pa.array(good))
            position += len(good)
            report.loaded += batch.num_rows
            yield unit, position, _from_arrow(batch, name)

    @staticmethod
    def _jsonl(
        unit: int, path: Path, batch_rows: int, skip: int, skip_invalid: bool, report: SkipReport, seen_ids: set[str]
    ) -> Iterator[tuple[int, int, RowBatch]]:
        rows, last = [], skip
        for lineno, record in iter_jsonl(path, skip_lines=skip):
            last = lineno
            try:
                if isinstance(record, BadLine):  # what iter_jsonl yields for an unreadable line
                    if skip_invalid and is_truncation(record):  # the lost tail is not "1 skipped row"
                        report.add_truncated(str(path), lineno - 1)
                        continue
                    raise RowError(str(path), f"line {lineno}", "<json>", record.msg)
                row = validate_row(record, str(path), lineno)
                if row.id in seen_ids:
                    raise RowError(str(path), row.id, "id", "duplicate id")
            except RowError as err:
                if not skip_invalid:
                    raise
                report.add(err)
                continue
            seen_ids.add(row.id)
            rows.append(row)
            if len(rows) >= batch_rows:
                report.loaded += len(rows)
                yield unit, last, _from_rows(rows, str(path))
                rows = []
        report.loaded += len(rows)
        yield unit, last, _from_rows(rows, str(path))
