"""The run folders an explorer page shows, opened and checked before any data loads: each mistake (no
such folder, a run that did not finish, no rows of the split, a missing or damaged file, runs of other
data) is one line naming the folder or file.

A page shows *views*: one per ``metrics.json`` row of the split (a GSR decoding mode, a reader's
variant, the quickstart's cosine baseline beside SubgraphRAG), each with its per-question values
(``questions.jsonl``) and the file the row names: a retrieval results file (ranked triples, chains,
paths) or a reader's predictions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gsr_train.config import register_resolvers
from gsr_train.data.errors import UserError
from gsr_train.eval.compare import KIND_LABELS, check_same_data
from gsr_train.eval.intervals import QuestionValues
from gsr_train.eval.tail import (
    METRICS_FILE,
    QUESTIONS_FILE,
    MetricsFileError,
    in_run,
    read_metrics,
    read_question_values,
)
from gsr_train.runtime.run_folder import unscored


class ExploreError(UserError, ValueError):
    """A run folder or file the explorer cannot show: one line naming it and why."""


@dataclass
class View:
    """One metrics row of the split: what it measured per question and the file it names."""

    run: int
    index: int  # the row's place in its run's metrics.json
    label: str
    row: dict
    values: QuestionValues | None
    file: Path | None
    kind: str  # "triples" (a results file), "predictions" (a reader's), "none"


@dataclass
class ExploredRun:
    folder: Path
    name: str
    metrics: dict
    config: DictConfig
    views: list[View] = field(default_factory=list)


def _label(row: dict, name: str) -> str:
    extra = [str(row[k]) for k in KIND_LABELS if row.get(k) is not None]
    return " ".join([name, str(row.get("method")), *extra])


def _metrics(folder: Path) -> dict:
    path = folder / METRICS_FILE
    why = unscored(folder)
    if why:
        raise ExploreError(why)
    try:
        return read_metrics(path)
    except MetricsFileError as e:
        raise ExploreError(str(e)) from None


def _config(folder: Path) -> DictConfig:
    path = folder / ".hydra" / "config.yaml"
    if not path.is_file():
        raise ExploreError(f"{folder}: no .hydra/config.yaml (the run's options, written by train.py or eval.py)")
    try:
        cfg = OmegaConf.load(path)
    except Exception as e:  # yaml's or OmegaConf's error, whichever
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ExploreError(f"{path}: not a readable run config ({first})") from None
    if not isinstance(cfg, DictConfig):
        raise ExploreError(f"{path}: not a run config (a mapping)")
    return cfg


def _values(folder: Path) -> dict[int, QuestionValues]:
    """Per metrics row (its position), its per-question values; none for a run written before them."""
    if not (folder / QUESTIONS_FILE).is_file():
        return {}
    try:
        return {int(labels["row"]): values for labels, values in read_question_values(folder)}
    except MetricsFileError as e:
        raise ExploreError(str(e)) from None


def _kind(file: Path | None) -> str:
    if file is None:
        return "none"
    if file.name.startswith("open_ended_"):
        return "open_ended"
    return "predictions" if file.name.startswith("predictions_") else "triples"


def _file_of(folder: Path, row: dict, split: str) -> Path | None:
    """The file behind a row: the one it names, or an open-ended condition's judged answers."""
    named = in_run(folder, row.get("results"))
    if named is None and row.get("condition") is not None:
        judged = folder / f"open_ended_{split}.jsonl"
        return judged if judged.is_file() else None
    return named


def open_run(path: str | Path, split: str, number: int, name: str) -> ExploredRun:
    """The run folder ``path`` with one view per metrics row of ``split``."""
    folder = Path(path)
    if not folder.is_dir():
        raise ExploreError(f"{path}: no such run folder")
    metrics = _metrics(folder)
    rows = [(i, r) for i, r in enumerate(metrics["rows"]) if r.get("split") == split]
    if not rows:
        have = sorted({str(r.get("split")) for r in metrics["rows"]})
        raise ExploreError(
            f"{folder}: no rows of split {split!r} in {METRICS_FILE} (it has: {', '.join(have)}); pass --split"
        )
    run = ExploredRun(folder, name, metrics, _config(folder))
    values = _values(folder)
    for i, row in rows:
        file = _file_of(folder, row, split)
        if file is not None and not file.is_file():
            raise ExploreError(f"{file}: named by {folder / METRICS_FILE} (row {i}) but missing")
        run.views.append(View(number, i, _label(row, name), row, values.get(i), file, _kind(file)))
    return run


def run_names(paths: Sequence[str | Path]) -> list[str]:
    """Short names of the runs: A, B, C, ... (the page lists the folders beside them)."""
    return [chr(ord("A") + i) if i < 26 else f"R{i}" for i in range(len(paths))]


def open_runs(paths: Sequence[str | Path], split: str) -> list[ExploredRun]:
    """Every run of a page, checked: the first's data are the page's, so the others must share it."""
    register_resolvers()
    runs = [open_run(p, split, i, n) for i, (p, n) in enumerate(zip(paths, run_names(paths)))]
    for other in runs[1:]:
        try:
            check_same_data(runs[0].folder, other.folder)
        except ValueError as e:
            raise ExploreError(str(e)) from None
    return runs


def row_labels(row: dict[str, Any]) -> dict[str, Any]:
    """A row's labels for the page (method, K, mode / variant ...), without its figures."""
    return {k: v for k, v in row.items() if k not in ("metrics", "intervals", "checkpoint", "results")}
