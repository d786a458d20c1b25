"""The one evaluation tail of every method: results -> metrics -> ``metrics.json`` -> table.

Every run folder holds its retrieval results as ``results_<split>.jsonl.gz`` (the project result
format, :mod:`gsr_train.eval.results`, compressed; folders of older runs hold ``.jsonl``, read the
same) and one ``metrics.json`` whose header is the same for every method, so a sweep's table
(``eval/aggregate.py``) reads nothing else. Paths in ``metrics.json`` that lie inside the run
folder are written relative to it (:func:`in_run` reads them back), so a moved folder still reads:

* ``schema``: :data:`SCHEMA`;
* ``experiment``, ``dataset: {name, fingerprint}`` (the fingerprint of the data the figures come from);
* ``rows``: one per evaluated method / variant, each ``{method, split, k, checkpoint, results,
  metrics: {name: value}}`` plus optional string labels (``mode``, ``variant``, ``perturbation``...).
  ``metrics`` are the figures at ``k`` (the method's cut-off: triples, chains or evidence lines).

The runner's own details (training, timings, per-K tables, statistics) follow the header in the
same file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gsr_train.io import write_json

SCHEMA = "gsr-train/metrics/1"
METRICS_FILE = "metrics.json"
HEADER = ("schema", "experiment", "dataset", "rows")
ROW_KEYS = ("method", "split", "k", "checkpoint", "results", "metrics")


class MetricsFileError(ValueError):
    """A ``metrics.json`` that does not follow :data:`SCHEMA`."""


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
    **labels: Any,
) -> dict:
    """One row of the tail: ``metrics`` at cut-off ``k`` of ``method`` on ``split``; ``labels`` are
    extra string columns that tell rows of one run apart (mode, variant, perturbation, level)."""
    return {
        "method": str(method),
        "split": split,
        "k": None if k is None else int(k),
        "checkpoint": None if checkpoint is None else str(checkpoint),
        "results": None if results is None else str(results),
        "metrics": {str(n): _value(v) for n, v in metrics.items()},
        **labels,
    }


COMPARE_KS = (10, 20, 50, 100)  # the Ks retrieval papers compare methods at


def retrieval_row(
    method: str,
    report: Any,
    split: str,
    k: int,
    checkpoint: str | None = None,
    results: str | Path | None = None,
    **labels: Any,
) -> dict:
    """A row from a :class:`~gsr_train.eval.retrieval.RetrievalReport`: each recall at ``k``, or at
    the largest evaluated K below it (the row's ``k`` says which), plus each recall at the Ks
    methods are compared at (``COMPARE_KS``, as ``<metric>@<K>``, the ones the report has): a run
    keeping 500 triples of a 100-triple graph scores 1.0 at its own K, not at 10."""
    overall = report.overall
    ks = sorted({int(x) for per_k in overall.values() for x in per_k})
    usable = [x for x in ks if x <= int(k)] or ks[:1]
    at = usable[-1] if usable else int(k)
    values = {m: per_k.get(at) for m, per_k in overall.items()}
    return metrics_row(method, split, at, {**values, **at_compare_ks(report, k)}, checkpoint, results, **labels)


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
    rows = [dict(r) for r in rows]
    for i, r in enumerate(rows):
        missing = [key for key in ROW_KEYS if key not in r]
        if missing:
            raise ValueError(f"metrics row {i} lacks {missing} (build rows with metrics_row / retrieval_row)")
    details = dict(details or {})
    clash = set(details) & set(HEADER)
    if clash:
        raise ValueError(f"run details may not use the header keys {sorted(clash)}")
    doc = {
        "schema": SCHEMA,
        "experiment": experiment,
        "dataset": {"name": data_name, "fingerprint": fingerprint},
        "rows": rows,
        **details,
    }
    doc = _relative(doc, Path(folder).resolve())  # a moved run folder still reads
    path = Path(folder) / METRICS_FILE
    write_json(path, doc)
    return path


def read_metrics(path: str | Path) -> dict:
    """A ``metrics.json``, checked against :data:`SCHEMA`; a file that is not one is named with why."""
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
        row.update({key: v for key, v in r.items() if key not in ROW_KEYS})
        row.update(r.get("metrics") or {})
        out.append(row)
    return out
