"""One results table across the runs of a sweep (Hydra multirun folder or any folder of runs).

Every run folder holds a figures file written by its runner (``results.json`` for
SubgraphRAG and the cosine baseline, ``metrics.json`` for GSR and the readers) and, when it
came from Hydra, ``.hydra/overrides.yaml`` (the swept values: they become the leading
columns). One extractor per run kind (``EXTRACTORS``; a new kind is one more entry) turns a
figures file into one or more flat rows with the kind's ``K``:

* SubgraphRAG: K = ``subgraphrag.top_k`` (triples kept per question), recall at K;
* GSR: K = ``gsr.decode.top_n`` (valid chains kept), chain match and answer coverage;
* readers: K = ``qa.k`` (evidence lines in the prompt), one row per evaluated variant;
* cosine: K = ``top_k``, recall at the largest evaluated K <= K.

``aggregate(root)`` writes ``aggregate.csv`` and ``aggregate.md`` into ``root`` (atomically)
and returns the rows. Hydra calls it at the end of every multirun through
:class:`AggregateCallback` (registered in ``conf/config.yaml``); by hand:
``gsr-train aggregate multirun/<experiment>/<time>``.
"""
from __future__ import annotations

import csv
import io
import json
import logging
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from gsr_train.io import atomic_write

log = logging.getLogger(__name__)

FIGURE_FILES = ("results.json", "metrics.json")
LEAD = ("job", "kind", "model", "data", "K")


def _num(v: Any) -> Any:
    return round(float(v), 4) if isinstance(v, float) else v


def _closest_k(per_k: Mapping[str, Any], k: int) -> tuple[int | None, Any]:
    """The value at the largest evaluated K <= k (keys may be ints or strings)."""
    ks = sorted(int(x) for x in per_k)
    usable = [x for x in ks if x <= k] or ks[:1]
    if not usable:
        return None, None
    best = usable[-1]
    return best, per_k.get(best, per_k.get(str(best)))


# ---------------------------------------------------------------------- extractors
def subgraphrag_rows(fig: Mapping[str, Any], cfg: Mapping[str, Any]) -> list[dict] | None:
    model = fig.get("model")
    if not isinstance(model, Mapping) or not ("at_k" in fig or model.get("scorer")):
        return None
    name = (fig.get("model") or {}).get("name", "subgraphrag")
    row = {"kind": "subgraphrag", "model": name, "data": fig.get("data")}
    at = fig.get("at_k")
    if at:
        row["K"] = at["k"]
        row.update({f"{m}@K": _num(v) for m, v in at.items() if m != "k"})
    else:  # results written before at_k existed: closest evaluated K
        k = int(((cfg.get("subgraphrag") or {}).get("top_k")) or 100)
        overall = fig["metrics"][name]["overall"]
        row["K"] = k
        for m, per_k in overall.items():
            row[f"{m}@K"] = _num(_closest_k(per_k, k)[1])
    cos = (fig.get("metrics") or {}).get("cosine")
    if cos and row.get("K") is not None:
        for m in ("answer_recall", "sp_recall"):
            if m in cos["overall"]:
                row[f"cosine_{m}@K"] = _num(_closest_k(cos["overall"][m], int(row["K"]))[1])
    tr = fig.get("training") or {}
    row.update({"epochs": tr.get("epochs_run"), "global_step": tr.get("global_step"),
                "best_val": _num(tr.get("best_score")), "train_s": _num((fig.get("timings") or {}).get("train_s"))})
    return [row]


def gsr_rows(fig: Mapping[str, Any], cfg: Mapping[str, Any]) -> list[dict] | None:
    if "variant" not in fig or "schedule" not in fig:
        return None
    k = ((cfg.get("gsr") or {}).get("decode") or {}).get("top_n")
    rows = []
    for mode in ("unconstrained", "constrained"):
        r = fig.get(mode)
        if not r:
            continue
        row = {"kind": "gsr", "model": fig.get("model"), "data": (cfg.get("data") or {}).get("name"),
               "K": k if k is not None else (r.get("decode") or {}).get("top_n"), "mode": mode,
               "variant": fig.get("variant"), "schedule": fig.get("schedule")}
        row.update({f"{m}": _num(v) for m, v in (r.get("chain_match") or {}).items()})
        for group in ("answer_coverage",):
            row.update({f"cov_{m}": _num(v) for m, v in (r.get(group) or {}).items() if isinstance(v, (int, float))})
        row.update({"epochs": (fig.get("fit") or {}).get("epochs_run"),
                    "global_step": (fig.get("fit") or {}).get("global_step"),
                    "train_s": _num(fig.get("train_seconds"))})
        rows.append(row)
    return rows


def reader_rows(fig: Mapping[str, Any], cfg: Mapping[str, Any]) -> list[dict] | None:
    if "qa" not in fig or "reader" not in fig:
        return None
    reader = fig.get("reader") or {}
    rows = []
    for variant, summary in (fig.get("metrics") or {}).items():
        view = (summary or {}).get("all") or {}
        row = {"kind": "reader", "model": reader.get("name"), "data": (cfg.get("data") or {}).get("name"),
               "K": fig.get("k"), "variant": variant, "n": view.get("n")}
        row.update({m: _num(v) for m, v in (view.get("metrics") or {}).items()})
        rows.append(row)
    return rows


def cosine_rows(fig: Mapping[str, Any], cfg: Mapping[str, Any]) -> list[dict] | None:
    if not str(fig.get("method", "")).startswith("cosine"):
        return None
    k = int(fig.get("k") or 100)
    row = {"kind": "cosine", "model": fig["method"], "data": fig.get("data"), "K": k}
    for m, per_k in (fig.get("metrics") or {}).get("overall", {}).items():
        row[f"{m}@K"] = _num(_closest_k(per_k, k)[1])
    return [row]


# figures -> rows; the first extractor that recognises a file wins (a reader kind: one entry)
EXTRACTORS: list[Callable[[Mapping[str, Any], Mapping[str, Any]], list[dict] | None]] = [
    subgraphrag_rows, gsr_rows, reader_rows, cosine_rows]


# ---------------------------------------------------------------------- collection
def _overrides(run: Path) -> dict[str, str]:
    path = run / ".hydra" / "overrides.yaml"
    if not path.exists():
        return {}
    from omegaconf import OmegaConf

    out = {}
    for item in OmegaConf.load(path) or []:
        key, _, value = str(item).partition("=")
        out[key.lstrip("+~")] = value
    return out


def _job_config(run: Path) -> dict:
    path = run / ".hydra" / "config.yaml"
    if not path.exists():
        return {}
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}


def run_folders(root: str | Path) -> list[Path]:
    """Folders under ``root`` (itself included) that hold a figures file, in job order."""
    root = Path(root)
    found = {p.parent for name in FIGURE_FILES for p in root.rglob(name)}

    def key(p: Path):
        rel = p.relative_to(root).parts
        return [(0, int(x)) if x.isdigit() else (1, x) for x in rel]

    return sorted(found, key=key)


def collect(root: str | Path) -> list[dict]:
    """Flat rows of every run under ``root``; swept overrides first, then the kind's figures."""
    root = Path(root)
    rows, overrides = [], []
    for run in run_folders(root):
        cfg = _job_config(run)
        over = _overrides(run)
        for name in FIGURE_FILES:
            path = run / name
            if not path.exists():
                continue
            try:
                fig = json.loads(path.read_text())
            except json.JSONDecodeError as e:
                log.warning("skipping %s: not valid JSON (%s)", path, e)
                continue
            for extract in EXTRACTORS:
                got = extract(fig, cfg)
                if got is not None:
                    job = str(run.relative_to(root)) if run != root else "."
                    rows += [{"job": job, **r} for r in got]
                    overrides += [over] * len(got)
                    break
    # swept = overrides whose value differs between runs (constant ones are in every job's config)
    keys = list(dict.fromkeys(k for o in overrides for k in o))
    swept = [k for k in keys if len({o.get(k) for o in overrides}) > 1]
    return [{"job": r["job"], **{k: o.get(k) for k in swept}, **{k: v for k, v in r.items() if k != "job"}}
            for r, o in zip(rows, overrides)]


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
    cols = cols or columns(rows)

    def cell(v: Any) -> str:
        if v is None:
            return ""
        return f"{v:.4f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---:" if all(
        isinstance(r.get(c), (int, float)) or r.get(c) is None for r in rows) else "---" for c in cols) + "|"]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows]
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
        log.warning("no run results (%s) under %s", " / ".join(FIGURE_FILES), root)
        return rows
    cols = columns(rows)
    md = to_markdown(rows, cols)
    if write:
        with atomic_write(root / "aggregate.csv", "w") as f:
            f.write(to_csv(rows, cols))
        with atomic_write(root / "aggregate.md", "w") as f:
            f.write(f"# {len(rows)} rows from {root}\n\n{md}\n")
    if not quiet:
        print(md)
    return rows


try:  # Hydra is a dependency, but keep this module importable on its own
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:  # pragma: no cover
    _HydraCallback = object


class AggregateCallback(_HydraCallback):
    """Hydra callback: after a multirun, write the aggregated table into the sweep folder."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = bool(enabled)

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        if not self.enabled:
            return
        sweep = Path(str(config.hydra.sweep.dir))
        if not sweep.exists():
            log.warning("multirun ended but %s does not exist (launcher wrote elsewhere?)", sweep)
            return
        rows = aggregate(sweep)
        log.info("aggregated %d rows into %s/aggregate.{csv,md}", len(rows), sweep)
