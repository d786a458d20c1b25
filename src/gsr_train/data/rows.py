"""KGQA rows in the RoG format, loaded from local files or a Hugging Face dataset name.

A row is ``id, question, answer, q_entity, a_entity, graph, choices``. Every row is
validated on load: a malformed row raises `RowError` naming the file, the row id
and the field, unless the caller asked to skip bad rows, in which case the skips are
counted per reason in a `SkipReport`.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gsr_train.data.arrow_files import arrow_batches, open_parquet
from gsr_train.data.errors import (  # noqa: F401  (DataFileError and SplitFilesError re-exported)
    DataFileError,
    RowError,
    SplitFilesError,
    SplitNotFoundError,
)
from gsr_train.io import iter_jsonl

log = logging.getLogger(__name__)

SPLIT_SUFFIXES = (".jsonl.gz", ".jsonl", ".json.gz", ".json", ".parquet", ".arrow")


@dataclass(frozen=True)
class Row:
    id: str
    question: str
    answer: tuple[str, ...]
    q_entity: tuple[str, ...]
    a_entity: tuple[str, ...]
    graph: tuple[tuple[str, str, str], ...]
    choices: tuple = ()


# what gsr_train.io.iter_jsonl yields (as the last item) when a (gzipped) file ends early
TRUNCATED_MARK = "the file is truncated or damaged"


def is_truncation(bad_line: Any) -> bool:
    """Whether an unreadable JSONL line is the cut-off end of the file (the rest of it is lost)
    rather than one bad line: a skip must not count a lost tail as one row."""
    return TRUNCATED_MARK in str(getattr(bad_line, "msg", bad_line))


@dataclass
class SkipReport:
    """Counts of skipped rows per reason, with the first few examples for the log, and the
    files cut off early (``truncated``: ``{"file", "after_line"}``; how many rows they lost
    is unknown: a truncated gzip does not say how long it was)."""

    counts: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    loaded: int = 0
    truncated: list[dict] = field(default_factory=list)

    def add(self, err: RowError) -> None:
        self.counts[f"{err.field}: {err.category}"] += 1
        if len(self.examples) < 10:
            self.examples.append(str(err))

    def add_truncated(self, path: str, after_line: int) -> None:
        entry = {"file": str(path), "after_line": int(after_line)}
        if entry in self.truncated:  # a resumed read meets the same cut again
            return
        self.truncated.append(entry)
        log.warning(
            "%s: truncated after line %d: the rest of the file is lost (how many rows it held is unknown)",
            path,
            after_line,
        )

    @property
    def skipped(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        text = f"{self.loaded} rows loaded, " + (
            f"{self.skipped} skipped (" + ", ".join(f"{n} x {reason}" for reason, n in self.counts.most_common()) + ")"
            if self.counts
            else "none skipped"
        )
        return text + "".join(f"; {truncated_text(t)}" for t in self.truncated)


def truncated_text(entry: dict) -> str:
    return f"{entry['file']} truncated after line {entry['after_line']} (the rest of the file is lost)"


def skip_figures(skips: dict, loaded: int | None = None) -> dict:
    """JSON-ready figures of one split's skip record (as in an index's ``meta.json``): rows
    loaded, skipped rows per reason, truncated files, and ``rows_lost`` (skipped rows; a lower
    bound, ``rows_lost_exact`` false, when a file was truncated)."""
    skipped = {str(k): int(v) for k, v in (skips.get("skipped") or {}).items()}
    truncated = [dict(t) for t in skips.get("truncated") or []]
    n = sum(skipped.values())
    return {
        "loaded": int(skips.get("loaded", loaded or 0)),
        "skipped_rows": n,
        "skipped": skipped,
        "truncated_files": truncated,
        "rows_lost": n,
        "rows_lost_exact": not truncated,
        "duplicate_triples_dropped": int(skips.get("duplicate_triples_dropped", 0)),
    }


def describe_skip_figures(split: str, fig: dict) -> str:
    """One clause for a log line: ``train: 95 loaded, 2 skipped (2 x graph: ...); ...``."""
    text = f"{split}: {fig['loaded']} loaded, " + (
        f"{fig['skipped_rows']} skipped (" + ", ".join(f"{n} x {r}" for r, n in fig["skipped"].items()) + ")"
        if fig["skipped_rows"]
        else "none skipped"
    )
    return text + "".join(f", {truncated_text(t)}" for t in fig["truncated_files"])


TRIPLE_REASON = "a triple is not three non-empty strings"


def string_list(value: Any, source: str, row_id: str, name: str, allow_empty: bool = True) -> tuple[str, ...]:
    if value is None:
        raise RowError(source, row_id, name, "missing")
    if not isinstance(value, (list, tuple)):
        raise RowError(source, row_id, name, f"expected a list of strings, got {type(value).__name__}")
    for item in value:
        if not isinstance(item, str):
            raise RowError(source, row_id, name, f"expected strings, found {type(item).__name__} {item!r}")
    if not allow_empty and not value:
        raise RowError(source, row_id, name, "empty")
    return tuple(value)


def validate_row(raw: Any, source: str, position: int) -> Row:
    """Turn one raw record into a `Row` or raise `RowError`."""
    if not isinstance(raw, dict):
        raise RowError(source, f"#{position}", "<row>", f"expected a JSON object, got {type(raw).__name__}")
    row_id = raw.get("id")
    if not isinstance(row_id, str) or not row_id:
        raise RowError(source, f"#{position}", "id", "missing or not a non-empty string")
    question = raw.get("question")
    if not isinstance(question, str) or not question.strip():
        raise RowError(source, row_id, "question", "missing or empty")
    answer = string_list(raw.get("answer"), source, row_id, "answer")
    q_entity = string_list(raw.get("q_entity"), source, row_id, "q_entity", allow_empty=False)
    a_entity = string_list(raw.get("a_entity"), source, row_id, "a_entity")
    graph_raw = raw.get("graph")
    if graph_raw is None:
        raise RowError(source, row_id, "graph", "missing")
    if not isinstance(graph_raw, (list, tuple)):
        raise RowError(source, row_id, "graph", f"expected a list of triples, got {type(graph_raw).__name__}")
    graph = []
    for k, triple in enumerate(graph_raw):
        if (
            not isinstance(triple, (list, tuple))
            or len(triple) != 3
            or not all(isinstance(x, str) and x for x in triple)
        ):
            raise RowError(
                source, row_id, "graph", f"triple #{k} is not three non-empty strings: {triple!r}", TRIPLE_REASON
            )
        graph.append(tuple(triple))
    choices = raw.get("choices")
    if choices is None:
        choices = ()
    elif not isinstance(choices, (list, tuple)):
        raise RowError(source, row_id, "choices", f"expected a list, got {type(choices).__name__} {choices!r}")
    return Row(row_id, question, answer, q_entity, a_entity, tuple(graph), tuple(choices))


def _iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    for lineno, record in iter_jsonl(path):
        if isinstance(record, json.JSONDecodeError):
            record = RowError(str(path), f"line {lineno}", "<json>", record.msg)
        yield lineno, record


def _iter_parquet(path: Path) -> Iterator[tuple[int, Any]]:

    position = 0
    for batch in open_parquet(path).iter_batches(batch_size=256):
        for record in batch.to_pylist():
            position += 1
            yield position, record


def _iter_arrow(path: Path) -> Iterator[tuple[int, Any]]:

    position = 0
    for batch in arrow_batches(path):
        for record in batch.to_pylist():
            position += 1
            yield position, record


def split_files(folder: str | Path, split: str) -> list[Path]:
    """The file(s) of ``split`` in a local folder: ``split.jsonl[.gz]``, ``split.parquet``,
    ``split.arrow`` or hub-style shards (``[data/]split-*.parquet``, in name order).

    Two different files for one split (``train.jsonl`` next to ``train.parquet``) are an
    error: silently reading one of them would train on data the user did not mean.
    """
    folder = Path(folder)
    groups = [[folder / f"{split}{suffix}"] for suffix in SPLIT_SUFFIXES if (folder / f"{split}{suffix}").is_file()]
    for pattern in (f"{split}-*.parquet", f"data/{split}-*.parquet"):
        shards = sorted(p for p in folder.glob(pattern) if p.is_file())
        if shards:
            groups.append(shards)
    if not groups:
        raise SplitNotFoundError(
            f"no file for split {split!r} in {folder} (looked for {split}{{{','.join(SPLIT_SUFFIXES)}}} "
            f"and [data/]{split}-*.parquet)"
        )
    if len(groups) > 1:
        names = ", ".join(
            str(g[0].relative_to(folder)) + (f" (+{len(g) - 1} shards)" if len(g) > 1 else "") for g in groups
        )
        raise SplitFilesError(f"{folder}: more than one file for split {split!r}: {names}; keep one of them")
    return groups[0]


def find_split_file(folder: str | Path, split: str) -> Path:
    """The (first) file of ``split`` in a local folder (see `split_files`)."""
    return split_files(folder, split)[0]


def iter_records(source: str | Path, split: str) -> Iterator[tuple[str, int, Any]]:
    """Yield ``(source_name, position, raw_record)`` from a folder, a file or a hub dataset name."""
    path = Path(source)
    if path.is_dir():
        files = split_files(path, split)
    elif path.is_file():
        files = [path]
    else:
        yield from _iter_hub(str(source), split)
        return
    for file in files:
        reader = {".parquet": _iter_parquet, ".arrow": _iter_arrow}.get(file.suffix, _iter_jsonl)
        for position, record in reader(file):
            yield str(file), position, record


def _iter_hub(name: str, split: str) -> Iterator[tuple[str, int, Any]]:
    """Rows of a Hugging Face dataset (``datasets`` caches the download as Arrow)."""
    import datasets  # lazy: datasets (pyarrow + fsspec + its hub client) takes a second; only hub names need it

    try:
        ds = datasets.load_dataset(name, split=split)
    except Exception as e:
        raise SplitNotFoundError(
            f"{name!r} is neither a local folder/file nor a loadable Hugging Face dataset "
            f"(split {split!r}): {e}. Offline? Point data.dir at a local folder of RoG-format "
            "splits instead."
        ) from e
    for k, record in enumerate(ds, start=1):
        yield f"{name}[{split}]", k, record


def load_rows(
    source: str | Path,
    split: str,
    skip_invalid: bool = False,
    report: SkipReport | None = None,
) -> tuple[list[Row], SkipReport]:
    """Load and validate every row of one split. Duplicate ids are an error too."""
    report = report if report is not None else SkipReport()
    rows: list[Row] = []
    seen: set[str] = set()
    for src, position, record in iter_records(source, split):
        try:
            if isinstance(record, RowError):
                if skip_invalid and is_truncation(record.reason):
                    report.add_truncated(src, position - 1)
                    continue
                raise record
            row = validate_row(record, src, position)
            if row.id in seen:
                raise RowError(src, row.id, "id", "duplicate id")
        except RowError as err:
            if not skip_invalid:
                raise
            report.add(err)
            continue
        seen.add(row.id)
        rows.append(row)
    report.loaded += len(rows)
    if report.skipped:
        log.warning("%s[%s]: %s", source, split, report.summary())
    return rows, report
