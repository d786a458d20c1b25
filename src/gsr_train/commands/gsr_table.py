"""``gsr-train gsr-table <run or multirun folder> [--json out.json]``: one table over GSR runs.

Every ``metrics.json`` under the folder written by a GSR experiment (``+experiment=gsr_*``, or
``+experiment=retrieve retriever=gsr``) gives one row per decoding mode: the run's settings (model,
relation head, residual, relation source, index ratio, walks, holdout, retrieval variant, schedule,
decoding mode, shortest-chain rule, epochs, training seconds) next to its chain match, answer
coverage and validity figures. Runs written before a setting was recorded read it from their composed
config (``.hydra/config.yaml``).
``python -m gsr_train.commands.gsr_table <folder>`` is the same command.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer
from omegaconf import OmegaConf

from gsr_train.commands import run
from gsr_train.eval.markdown import format_cell, markdown_table
from gsr_train.eval.schema import INTERVALS
from gsr_train.io import write_json

TABLE_COLUMNS = (
    "match@1",
    "match@3",
    "match@10",
    "end_match@1",
    "end_match@3",
    "seen_match@1",
    "seen_match@3",
    "unseen_match@1",
    "unseen_match@3",
    "cov_precision",
    "cov_recall",
    "cov_f1",
    "paper_precision",
    "paper_recall",
    "paper_f1",
    "cov_hits",
    "valid_fraction",
    "valid_fraction@3",
)
SETTINGS = (
    "model",
    "head",
    "residual",
    "relations",
    "index_ratio",
    "walks",
    "holdout",
    "variant",
    "schedule",
    "mode",
    "shortest",
    "epochs",
    "train_s",
)


def _relation_head(figures: Mapping, run: Path) -> str:
    """The run's relation head (from its figures, else from its saved model's spec)."""
    if figures.get("relation_head"):
        return str(figures["relation_head"])
    spec = run / "model" / "gsr_config.json"
    return str(json.loads(spec.read_text())["spec"].get("relation_head", "token")) if spec.is_file() else "token"


def _run_settings(figures: Mapping, run: Path):
    """``setting(key, path, default)``: a run's setting from its figures, else from its composed
    config (runs older than the key), the config read at most once."""
    loaded: list = []

    def setting(key: str, path: str, default):
        if key in figures:
            return figures[key]
        if not loaded:
            cfg_file = run / ".hydra" / "config.yaml"
            loaded.append(OmegaConf.load(cfg_file) if cfg_file.is_file() else None)
        if loaded[0] is None:
            return default
        value = OmegaConf.select(loaded[0], path, default=default)
        return default if value is None else value

    return setting


def _settings(m: Mapping, run: Path) -> dict:
    """The columns that describe one run (its model, relation head and training data)."""
    setting = _run_settings(m, run)
    head = _relation_head(m, run)
    residual = setting("relation_residual", "model.relation_residual", True)
    dropout = float(setting("relation_residual_dropout", "model.relation_residual_dropout", 0.0))
    data = m.get("data_summary") or m.get("data")  # +experiment=retrieve: "data" is the dataset's name
    data = data if isinstance(data, dict) else {}
    return {
        "run": str(run),
        "model": m.get("model"),
        "head": head,
        "residual": ("no" if not residual else f"drop {dropout:g}" if dropout else "yes") if head == "open" else "",
        "relations": setting("relation_source", "gsr.relations.source", "kg"),
        "index_ratio": float(setting("index_ratio", "gsr.index_ratio", 1.0)),
        "walks": int(data.get("walks", 0)),
        "holdout": float(setting("holdout", "gsr.holdout.fraction", 0.0)),
    }


def _mode_row(m: Mapping, mode: str, settings: dict) -> dict:
    """One decoding mode of one run: its settings, flat chain figures and their intervals
    (``intervals``: the mode's own, else those of the mode's metrics.json row, for runs that kept only
    the row's)."""
    from gsr_train.eval.chains import ChainReport  # lazy: torch (help needs none)

    r = m[mode]
    rep = ChainReport(
        r.get("split", ""),
        r["chain_match"],
        r["answer_coverage"],
        r["paper_coverage"],
        r["validity"],
        r.get("match_by_group") or {},
        r.get("end_match") or {},
    )
    # constrained runs before gsr.decode.shortest existed decoded without it
    shortest = bool((r.get("decode") or {}).get("shortest", False)) if mode == "constrained" else None
    return {
        **settings,
        "variant": m["variant"],
        "schedule": m["schedule"],
        "mode": mode,
        "shortest": "" if shortest is None else ("yes" if shortest else "no"),
        "epochs": (m.get("fit") or m.get("training") or {}).get("epochs_run"),  # training: +experiment=retrieve
        "train_s": round(m.get("train_seconds", 0.0)),
        **rep.flat(),
        INTERVALS: r.get(INTERVALS) or _row_intervals(m, mode),
    }


def _row_intervals(m: Mapping, mode: str) -> dict:
    """The intervals on the metrics.json row of decoding ``mode`` ({} if none)."""
    for row in m.get("rows") or []:
        if isinstance(row, Mapping) and row.get("mode") == mode:
            return dict(row.get(INTERVALS) or {})
    return {}


def collect_metrics(root: str | Path) -> list[dict]:
    """Flat rows from every GSR ``metrics.json`` under ``root`` (a run folder or a multirun folder)."""
    rows = []
    for path in sorted(Path(root).rglob("metrics.json")):
        try:
            m = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not a readable metrics file ({e}); re-score the run with eval.py") from None
        if not isinstance(m, dict) or "variant" not in m:
            continue
        settings = _settings(m, path.parent)
        rows += [_mode_row(m, mode, settings) for mode in ("unconstrained", "constrained") if mode in m]
    return rows


def metrics_table(rows: list[dict], columns=TABLE_COLUMNS) -> str:
    """A markdown table: one line per run and decoding mode, each figure with its 95% interval."""
    head = [*SETTINGS, *columns]
    lines = []
    for r in rows:
        bounds = r.get(INTERVALS) or {}
        lines.append([format_cell(r.get(c, ""), bounds.get(c) if c in columns else None, 4) for c in head])
    return markdown_table(head, lines, left=len(SETTINGS))


def command(
    root: Annotated[str, typer.Argument(metavar="ROOT", help="a GSR run folder, or a folder of them (a multirun)")],
    json_out: Annotated[str | None, typer.Option("--json", help="also write the rows as JSON")] = None,
) -> int:
    """One GSR results table over run folders (a run, or a multirun's runs)."""
    if not Path(root).is_dir():
        raise FileNotFoundError(f"{root}: no such folder")
    found = collect_metrics(root)
    if not found:
        raise FileNotFoundError(f"{root}: no GSR run results under it (no metrics.json of a GSR experiment)")
    print(metrics_table(found))
    if json_out:
        write_json(json_out, found)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(command, argv, "gsr-train gsr-table")


if __name__ == "__main__":
    raise SystemExit(main())
