"""One results table across the runs of a sweep (Hydra multirun folder or any folder of runs).

Every run folder holds one ``metrics.json`` in the schema every method shares
(`gsr_train.eval.tail`): its ``rows`` (method, split, K, checkpoint, labels, metrics at K)
become the table's rows, and the run's ``.hydra/overrides.yaml`` (when it came from Hydra)
supplies the swept values as leading columns. Nothing else is read, so a new method needs no
entry here. A figures file that is not in the schema is named in a warning and skipped.

``aggregate(root)`` writes ``aggregate.csv`` and ``aggregate.md`` into ``root`` (atomically)
and returns the rows. Hydra calls it at the end of every multirun through
`AggregateCallback` (registered in ``conf/config.yaml``); by hand:
``gsr-train aggregate multirun/<experiment>/<time>``.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from gsr_train.eval.intervals import seed_summary
from gsr_train.eval.tail import (
    HIGH,
    LOW,
    METRICS_FILE,
    STD,
    MetricsFileError,
    cell_text,
    flat_rows,
    read_metrics,
    table_columns,
)
from gsr_train.io import atomic_write

log = logging.getLogger(__name__)

LEAD = ("job", "method", "data", "split", "K")


def _num(v: Any) -> Any:
    return round(float(v), 4) if isinstance(v, float) else v


# ---------------------------------------------------------------------- collection
def _overrides(run: Path) -> dict[str, str]:
    path = run / ".hydra" / "overrides.yaml"
    if not path.exists():
        return {}

    out = {}
    for item in OmegaConf.load(path) or []:
        key, _, value = str(item).partition("=")
        out[key.lstrip("+~")] = value
    return out


def run_folders(root: str | Path) -> list[Path]:
    """Folders under ``root`` (itself included) that hold a figures file, in job order."""
    root = Path(root)
    found = {p.parent for p in root.rglob(METRICS_FILE)}

    def key(p: Path):
        rel = p.relative_to(root).parts
        return [(0, int(x)) if x.isdigit() else (1, x) for x in rel]

    return sorted(found, key=key)


def collect(root: str | Path) -> list[dict]:
    """Flat rows of every run under ``root``; swept overrides first, then the kind's figures."""
    root = Path(root)
    rows, overrides = [], []
    for run in run_folders(root):
        over = _overrides(run)
        try:
            doc = read_metrics(run / METRICS_FILE)
        except MetricsFileError as e:
            log.warning("skipping %s", e)
            continue
        got = [{k: _num(v) for k, v in r.items()} for r in flat_rows(doc)]
        job = str(run.relative_to(root)) if run != root else "."
        rows += [{"job": job, **r} for r in got]
        overrides += [over] * len(got)
    # swept = overrides whose value differs between runs (constant ones are in every job's config)
    keys = list(dict.fromkeys(k for o in overrides for k in o))
    swept = [k for k in keys if len({o.get(k) for o in overrides}) > 1]
    return [
        {"job": r["job"], **{k: o.get(k) for k in swept}, **{k: v for k, v in r.items() if k != "job"}}
        for r, o in zip(rows, overrides)
    ]


def columns(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Lead columns, then the swept overrides, then every figure in first-seen order."""
    rows = list(rows)
    seen: dict[str, None] = {}
    for r in rows:
        for k in r:
            seen.setdefault(k, None)
    lead = [c for c in LEAD if c in seen]
    swept = [c for c in seen if "." in c or c in ("model_override",)]
    rest = [c for c in seen if c not in lead and c not in swept]
    return lead + swept + rest


def to_markdown(rows: list[dict], cols: list[str] | None = None) -> str:
    """The rows as a markdown table; a figure with an interval (``<name>_low`` / ``<name>_high``
    columns) is one cell, ``0.7660 (0.720-0.810)``."""
    cols = table_columns(cols or columns(rows))
    lines = [
        "| " + " | ".join(cols) + " |",
        "|"
        + "|".join(
            "---:" if all(isinstance(r.get(c), (int, float)) or r.get(c) is None for r in rows) else "---" for c in cols
        )
        + "|",
    ]
    lines += ["| " + " | ".join(cell_text(r, c) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def to_csv(rows: list[dict], cols: list[str] | None = None) -> str:
    cols = cols or columns(rows)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def aggregate(root: str | Path, write: bool = True, quiet: bool = False) -> list[dict]:
    """Collect the runs under ``root``; write ``aggregate.csv`` / ``aggregate.md`` there; print the table."""
    root = Path(root)
    rows = collect(root)
    if not rows:
        log.warning("no run results (%s) under %s", METRICS_FILE, root)
        return rows
    search_md = mark_best_trial(rows, root)
    cols = columns(rows)
    md = to_markdown(rows, cols)
    seeds = over_seeds(rows)
    seeds_md = f"\n\n## over {SEED} ({SEEDS_NOTE})\n\n{to_markdown(seeds)}" if seeds else ""
    seeds_md += search_md
    if write:
        with atomic_write(root / "aggregate.csv", "w") as f:
            f.write(to_csv(rows, cols))
        if seeds:
            with atomic_write(root / SEEDS_CSV, "w") as f:
                f.write(to_csv(seeds))
        with atomic_write(root / "aggregate.md", "w") as f:
            f.write(f"# {len(rows)} rows from {root}\n\n{md}{seeds_md}\n")
        plot_recall_at_k(seeds or rows, root / PLOT_FILE)
    if not quiet:
        print(md + seeds_md)
    return rows


OPTUNA_FILE = "optuna.json"  # an Optuna search's trials and best trial (gsr_train.runtime.optuna_sweep)


def mark_best_trial(rows: list[dict], root: Path) -> str:
    """For an Optuna search (``root/optuna.json``): its best trial's rows get ``search: best trial``
    (a column of the table, a label in the plot); returns the search's section of aggregate.md."""
    path = root / OPTUNA_FILE
    if not path.is_file():
        return ""

    try:
        search = json.loads(path.read_text())
        best, objective, direction = search.get("best"), search["objective"], search["direction"]
        trials = search["trials"]
    except (ValueError, KeyError, TypeError) as e:
        log.warning("%s: not an Optuna search summary (%s)", path, e)
        return ""
    if best:
        for r in rows:
            if r["job"] == str(best["trial"]):
                r["search"] = "best trial"
    lines = [{"trial": t["trial"], "state": t["state"], objective: _num(t["value"]), **t["params"]} for t in trials]
    table = to_markdown(lines, list(dict.fromkeys(k for line in lines for k in line)))
    head = f"best: trial {best['trial']}, {objective} = {_num(best['value'])}" if best else "no trial finished"
    return f"\n\n## Optuna search ({objective}, {direction}; {head})\n\n{table}"


SEED = "seed"  # the override a seed sweep varies
SEEDS_CSV = "aggregate_seeds.csv"
SEEDS_NOTE = "mean ± standard deviation (95% Student t interval of the mean over the seeds)"


def over_seeds(rows: list[dict]) -> list[dict]:
    """A seed sweep's rows (``seed`` swept) as one row per setting: each figure's mean over the seeds
    (``<name>``), its standard deviation (``<name>_std``) and the 95% t interval of the mean
    (``<name>_low`` / ``<name>_high``), with the number of seeds; no rows when no seed was swept."""
    if not rows or not any(SEED in r for r in rows) or len({r.get(SEED) for r in rows}) < 2:
        return []
    figures = [c for c in columns(rows) if any(isinstance(r.get(c), float) for r in rows) and not _bound(c)]
    setting = [c for c in columns(rows) if c not in figures and c not in ("job", SEED) and not _bound(c)]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(str(r.get(c)) for c in setting), []).append(r)
    out = []
    for members in groups.values():
        row: dict[str, Any] = {c: members[0].get(c) for c in setting}
        row["seeds"] = len(members)
        for c in figures:
            summary = seed_summary(r[c] for r in members if isinstance(r.get(c), (int, float)))
            if summary["mean"] is not None:
                row[c], row[f"{c}{STD}"] = _num(summary["mean"]), _num(summary["std"])
                row[f"{c}{LOW}"], row[f"{c}{HIGH}"] = _num(summary["low"]), _num(summary["high"])
        out.append(row)
    return out


def _bound(column: str) -> bool:
    return column.endswith((LOW, HIGH, STD))


PLOT_FILE = "aggregate_recall.png"
PLOT_METRICS = ("answer_recall", "sp_recall", "labelled_recall")


def recall_curves(rows: Iterable[Mapping[str, Any]], metric: str) -> dict[str, list[tuple[int, float]]]:
    """``metric@K`` of each row (label: job, method, the row's labels), in K order."""
    return {label: [(k, v) for k, v, _, _ in points] for label, points in _curves(rows, metric).items()}


def _interval(r: Mapping[str, Any], key: str) -> tuple[float | None, float | None]:
    low, high = r.get(f"{key}{LOW}"), r.get(f"{key}{HIGH}")
    ok = isinstance(low, (int, float)) and isinstance(high, (int, float))
    return (float(low), float(high)) if ok else (None, None)  # type: ignore[arg-type]


def _curves(rows: Iterable[Mapping[str, Any]], metric: str) -> dict[str, list[tuple[int, float, Any, Any]]]:
    """``(K, value, low, high)`` of ``metric@K`` of each row (bounds None without an interval)."""
    curves: dict[str, list[tuple[int, float, Any, Any]]] = {}
    for r in rows:
        points = sorted(
            (int(key.rsplit("@", 1)[1]), float(v), *_interval(r, key))
            for key, v in r.items()
            if key.startswith(f"{metric}@") and key.rsplit("@", 1)[1].isdigit() and isinstance(v, (int, float))
        )
        if points:
            extra = [str(r[c]) for c in ("mode", "variant", "perturbation", "level", "search") if r.get(c) is not None]
            curves[" ".join([str(r.get("job", "")), str(r.get("method", "")), *extra]).strip()] = points
    return curves


def plot_recall_at_k(rows: list[dict], path: Path) -> Path | None:
    """One PNG: recall@K (10 / 20 / 50 / 100) of every retrieval row, a panel per recall metric; each
    point with its 95% interval as an error bar where the row has one."""
    panels = [(m, c) for m in PLOT_METRICS if (c := _curves(rows, m))]
    if not panels:
        return None
    import matplotlib  # lazy: matplotlib is only needed to draw plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib is only needed to draw plots

    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, (metric, curves) in zip(axes[0], panels):
        for label, points in curves.items():
            ks, values = [p[0] for p in points], [p[1] for p in points]
            below = [v - lo if lo is not None else 0.0 for _, v, lo, _ in points]
            above = [hi - v if hi is not None else 0.0 for _, v, _, hi in points]
            ax.errorbar(ks, values, yerr=[below, above], marker="o", capsize=3, label=label)
        ax.set_xscale("log")
        ax.set_xticks(sorted({p[0] for pts in curves.values() for p in pts}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("K (triples kept)")
        ax.set_title(f"{metric}@K")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
    return path
