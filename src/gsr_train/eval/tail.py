"""The one evaluation tail of every method: results -> metrics -> ``metrics.json`` -> table.

Every run folder holds its retrieval results as ``results_<split>.jsonl.gz`` (the project result
format, `gsr_train.eval.results`, compressed; folders of older runs hold ``.jsonl``, read the
same) and one ``metrics.json`` whose header is the same for every method, so a sweep's table
(``eval/aggregate.py``) reads nothing else. Paths in ``metrics.json`` that lie inside the run
folder are written relative to it (`in_run` reads them back), so a moved folder still reads:

* ``schema``: `SCHEMA`;
* ``experiment``, ``dataset: {name, fingerprint}`` (the fingerprint of the data the figures come from);
* ``rows``: one per evaluated method / variant, each ``{method, split, k, checkpoint, results,
  metrics: {name: value}}`` plus optional string labels (``mode``, ``variant``, ``perturbation``...).
  ``metrics`` are the figures at ``k`` (the method's cut-off: triples, chains or evidence lines);
  ``intervals: {name: [low, high]}`` their 95% bootstrap intervals over questions
  (`gsr_train.eval.intervals`), for the figures measured on questions.

The per-question values the intervals come from are kept in ``questions.jsonl`` (one line per row:
``{"row": i, "method", "split", "k", labels, "ids", "metrics"}``) for ``gsr-train compare``.

The runner's own details (training, timings, per-K tables, statistics) follow the header in the
same file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gsr_train.eval.intervals import QuestionValues, format_estimate
from gsr_train.eval.schema import COMPARE_KS, INTERVALS, METRICS_FILE, QUESTIONS_FILE, SCHEMA
from gsr_train.io import iter_jsonl, write_json, write_jsonl

HEADER = ("schema", "experiment", "dataset", "rows")
ROW_KEYS = ("method", "split", "k", "checkpoint", "results", "metrics")
_VALUES = "_per_question"  # a row's QuestionValues until write_metrics keeps them in QUESTIONS_FILE


class MetricsFileError(ValueError):
    """A ``metrics.json`` that does not follow `SCHEMA`."""


RESULTS_SUFFIXES = (".jsonl.gz", ".jsonl")  # what runs write now, what older runs wrote


def results_file(folder: str | Path, split: str, tag: str = "") -> Path:
    """Where a run writes the retrieval results of ``split`` (compressed)."""
    return Path(folder) / f"results_{split}{tag}{RESULTS_SUFFIXES[0]}"


def find_results(folder: str | Path, split: str, tag: str = "") -> Path:
    """The results file of ``split`` in a run folder, new (``.jsonl.gz``) or old (``.jsonl``); the new
    name when there is neither."""
    for suffix in RESULTS_SUFFIXES:
        path = Path(folder) / f"results_{split}{tag}{suffix}"
        if path.is_file():
            return path
    return results_file(folder, split, tag)


def in_run(folder: str | Path, path: str | Path | None) -> Path | None:
    """A path read from a run's ``metrics.json``: relative ones are inside the run folder (absolute
    ones, from older runs or outside the folder, are kept)."""
    return None if path is None or str(path) == "" else Path(folder) / path


def _relative(value: Any, folder: Path) -> Any:
    """``value`` with every path string inside ``folder`` made relative to it (dicts, lists walked)."""
    if isinstance(value, Mapping):
        return {k: _relative(v, folder) for k, v in value.items()}
    if isinstance(value, list):
        return [_relative(v, folder) for v in value]
    if isinstance(value, str) and "/" in value and "\n" not in value and len(value) < 4096:
        try:
            path = Path(value).resolve()
        except (OSError, RuntimeError, ValueError):
            return value
        if path != folder and path.is_relative_to(folder):
            return str(path.relative_to(folder))
    return value


def _value(v: Any) -> Any:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


def metrics_row(
    method: str,
    split: str | None,
    k: int | None,
    metrics: Mapping[str, Any],
    checkpoint: str | None = None,
    results: str | Path | None = None,
    per_question: QuestionValues | None = None,
    **labels: Any,
) -> dict:
    """One row of the tail: ``metrics`` at cut-off ``k`` of ``method`` on ``split``; ``labels`` are
    extra string columns that tell rows of one run apart (mode, variant, perturbation, level).
    ``per_question``: the questions' values of (some of) the metrics: their intervals go on the row
    (computed here, once) and the values into the run's ``questions.jsonl``."""
    row = {
        "method": str(method),
        "split": split,
        "k": None if k is None else int(k),
        "checkpoint": None if checkpoint is None else str(checkpoint),
        "results": None if results is None else str(results),
        "metrics": {str(n): _value(v) for n, v in metrics.items()},
        **labels,
    }
    if per_question is not None:
        add_intervals(row, per_question)
    return row


def add_intervals(row: dict, per_question: QuestionValues) -> dict:
    """The intervals of the row's metrics that ``per_question`` measures (the values themselves stay
    the row's), and the values kept for ``questions.jsonl``."""
    kept = QuestionValues(per_question.ids, {n: p for n, p in per_question.parts.items() if n in row["metrics"]})
    old = row.get(_VALUES)
    if old is not None and set(old.ids) == set(kept.ids):  # one row's figures on the same questions
        kept = QuestionValues(old.ids, {**old.parts, **kept.take(old.ids).parts})
    bounds = kept.intervals()
    row[INTERVALS] = {**(row.get(INTERVALS) or {}), **{n: list(b) for n, b in bounds.items() if b is not None}}
    row[_VALUES] = kept
    return row


def retrieval_row(
    method: str,
    report: Any,
    split: str,
    k: int,
    checkpoint: str | None = None,
    results: str | Path | None = None,
    **labels: Any,
) -> dict:
    """A row from a `gsr_train.eval.retrieval.RetrievalReport`: each recall at ``k``, or at
    the largest evaluated K below it (the row's ``k`` says which), plus each recall at the Ks
    methods are compared at (``COMPARE_KS``, as ``<metric>@<K>``, the ones the report has): a run
    keeping 500 triples of a 100-triple graph scores 1.0 at its own K, not at 10."""
    overall = report.overall
    ks = sorted({int(x) for per_k in overall.values() for x in per_k})
    usable = [x for x in ks if x <= int(k)] or ks[:1]
    at = usable[-1] if usable else int(k)
    values = {m: per_k.get(at) for m, per_k in overall.items()}
    figures = {**values, **at_compare_ks(report, k)}
    return metrics_row(method, split, at, figures, checkpoint, results, report.question_values(at, k), **labels)


def at_compare_ks(report: Any, k: int) -> dict[str, float | None]:
    """``<metric>@<K>`` of a retrieval report at each of ``COMPARE_KS`` it has, up to the ``k`` kept."""
    return {
        f"{m}@{c}": per_k[c] for m, per_k in report.overall.items() for c in COMPARE_KS if c in per_k and c <= int(k)
    }


def write_metrics(
    folder: str | Path,
    experiment: str | None,
    data_name: str | None,
    fingerprint: str | None,
    rows: Iterable[Mapping[str, Any]],
    details: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``folder/metrics.json`` (atomically): the common header, then the runner's ``details``."""
    written = [dict(r) for r in rows]
    for i, r in enumerate(written):
        missing = [key for key in ROW_KEYS if key not in r]
        if missing:
            raise ValueError(f"metrics row {i} lacks {missing} (build rows with metrics_row / retrieval_row)")
    per_question = [r.pop(_VALUES, None) for r in written]
    details = dict(details or {})
    clash = set(details) & set(HEADER)
    if clash:
        raise ValueError(f"run details may not use the header keys {sorted(clash)}")
    doc = {
        "schema": SCHEMA,
        "experiment": experiment,
        "dataset": {"name": data_name, "fingerprint": fingerprint},
        "rows": written,
        **details,
    }
    doc = _relative(doc, Path(folder).resolve())  # a moved run folder still reads
    path = Path(folder) / METRICS_FILE
    kept = [(i, v) for i, v in enumerate(per_question) if v is not None and len(v)]
    if kept:  # first, so a metrics.json never names values that are not there
        write_jsonl(Path(folder) / QUESTIONS_FILE, (_questions_line(i, written[i], v) for i, v in kept))
    write_json(path, doc)
    return path


def _questions_line(i: int, row: Mapping[str, Any], values: QuestionValues) -> dict:
    """The row's method, split, K and labels, then its per-question values."""
    labels = {k: v for k, v in row.items() if k not in (*ROW_KEYS, INTERVALS)}
    return {"row": i, "method": row["method"], "split": row["split"], "k": row["k"], **labels, **values.to_json()}


def read_question_values(folder: str | Path) -> list[tuple[dict, QuestionValues]]:
    """Each row's labels (method, split, k, ...) and per-question values of a run folder, from
    ``questions.jsonl``; a run written before it existed has none (FileNotFoundError naming it)."""
    path = Path(folder) / QUESTIONS_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no per-question values (a run written before intervals existed: "
            "re-score it with `python eval.py ckpt_path=<run folder>`)"
        )
    out = []
    for lineno, doc in iter_jsonl(path):
        if isinstance(doc, json.JSONDecodeError) or not isinstance(doc, dict) or "ids" not in doc:
            raise MetricsFileError(f"{path}: line {lineno}: not a row of per-question values")
        try:
            values = QuestionValues.from_json(doc)
        except ValueError as e:
            raise MetricsFileError(f"{path}: line {lineno}: {e}") from None
        out.append(({k: v for k, v in doc.items() if k not in ("ids", "metrics")}, values))
    return out


def read_metrics(path: str | Path) -> dict:
    """A ``metrics.json``, checked against `SCHEMA`; a file that is not one is named with why."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise MetricsFileError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise MetricsFileError(
            f"{path}: not a {SCHEMA} metrics file (schema: {found!r}); "
            "re-score the run with `python eval.py ckpt_path=<run folder>`"
        )
    if not isinstance(doc.get("rows"), list) or not all(isinstance(r, dict) and "metrics" in r for r in doc["rows"]):
        raise MetricsFileError(f"{path}: 'rows' must be a list of rows with metrics")
    return doc


def flat_rows(doc: Mapping[str, Any]) -> list[dict]:
    """The rows of a metrics document as flat table rows: method, data, split, K, labels, metrics."""
    data = doc.get("dataset") or {}
    out = []
    for r in doc["rows"]:
        row = {"method": r.get("method"), "data": data.get("name"), "split": r.get("split"), "K": r.get("k")}
        row.update({key: v for key, v in r.items() if key not in ROW_KEYS and key != INTERVALS})
        row.update(r.get("metrics") or {})
        for name, bounds in (r.get(INTERVALS) or {}).items():  # name_low / name_high beside name
            if name in row and isinstance(bounds, list) and len(bounds) == 2:
                row[f"{name}{LOW}"], row[f"{name}{HIGH}"] = bounds
        out.append(row)
    return out


LOW, HIGH, STD = "_low", "_high", "_std"  # a flat row's interval (and over seeds, spread) columns of a metric


def cell_text(row: Mapping[str, Any], column: str, digits: int = 4) -> str:
    """A flat row's cell: ``0.7660 (0.720-0.810)`` where the row has the metric's interval columns,
    ``0.7660 ± 0.0120 (0.736-0.796)`` where it also has its spread over seeds."""
    v = row.get(column)
    if v is None:
        return ""
    if not isinstance(v, float):
        return str(v)
    low, high, std = row.get(f"{column}{LOW}"), row.get(f"{column}{HIGH}"), row.get(f"{column}{STD}")
    bounded = isinstance(low, (int, float)) and isinstance(high, (int, float))
    text = format_estimate(v, float(low) if bounded else None, float(high) if bounded else None, digits)  # type: ignore[arg-type]
    if isinstance(std, (int, float)):  # a mean over seeds: ``0.7660 ± 0.0120 (0.736-0.796)``
        value = f"{v:.{digits}f}"
        return f"{value} ± {std:.{digits}f}{text[len(value) :]}"
    return text


def table_columns(columns: Iterable[str]) -> list[str]:
    """The columns a table shows: a metric's interval columns are written in its cell."""
    columns = list(columns)
    shown = set(columns)
    return [c for c in columns if not any(c.endswith(end) and c[: -len(end)] in shown for end in (LOW, HIGH, STD))]
