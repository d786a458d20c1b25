"""The results figure: recall@K of every retriever on webqsp_mini test, from runs this script launches.

    python bench/results_figure.py

Each retriever is one ``python train.py`` run of its shipped experiment on ``data=webqsp_mini`` with
``top_k=100`` (so every run reports recall at K = 10 / 20 / 50 / 100; the pattern retrievers, with the
gold patterns of their experiments, keep 100 subgraphs), in ``--runs``/<name>/; a run
folder that already holds a ``metrics.json`` is read, not run again, so a killed bench resumes and
``--only`` reruns one retriever. From the runs' ``metrics.json`` rows it writes, relative to the
current folder:

* ``docs/figures/retrievers_recall_webqsp_mini.png``: answer recall@K, shortest-path triple recall@K
  and GPT-labelled triple recall@K, one line per retriever (:func:`gsr_train.eval.aggregate.plot_recall_at_k`);
* ``docs/results/retrievers_recall_webqsp_mini.json``: the same numbers, each with its command and wall time;
* the table of ``docs/explanations/results.md`` (between its ``results_figure`` markers), when the page is there.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

FIGURE = Path("docs/figures/retrievers_recall_webqsp_mini.png")
NUMBERS = Path("docs/results/retrievers_recall_webqsp_mini.json")
PAGE = Path("docs/explanations/results.md")
BEGIN, END = (
    "<!-- results_figure: begin (bench/results_figure.py writes this table) -->",
    "<!-- results_figure: end -->",
)
COMMON = ("data=webqsp_mini", "top_k=100")
METRICS = {"answer_recall": "answer", "sp_recall": "shortest-path triples", "labelled_recall": "GPT-labelled triples"}
KS = (10, 20, 50, 100)


@dataclass(frozen=True)
class Retriever:
    name: str  # its run folder under --runs
    label: str  # its name in the figure and the table
    overrides: tuple[str, ...]  # after python train.py (then `common`)
    method: str | None = None  # the metrics.json row read (None: the first with recall@K)
    common: tuple[str, ...] = COMMON  # the pattern retrievers keep k subgraphs, not top_k triples


RETRIEVERS = (
    Retriever("cosine", "cosine (q.h + q.r + q.t)", ("+experiment=retrieve", "retriever=cosine")),
    Retriever("ppr", "PPR (OKGQA's pruning)", ("+experiment=retrieve", "retriever=ppr")),
    Retriever("classic_triplets", "classic top-k triplets", ("+experiment=retrieve", "retriever=classic-triplets")),
    Retriever("classic_paths", "classic prize-cost paths", ("+experiment=retrieve", "retriever=classic-paths")),
    Retriever("classic_pcst", "classic PCST (G-Retriever)", ("+experiment=retrieve", "retriever=classic-pcst")),
    Retriever(
        "subgraphrag",
        "SubgraphRAG",
        ("+experiment=subgraphrag_webqsp_mini", "subgraphrag.compare_cosine=false"),
        method="subgraphrag",
    ),
    Retriever("gnnrag", "GNN-RAG", ("+experiment=gnnrag_webqsp_mini",)),
    Retriever("gsr", "GSR (gsr_tiny)", ("+experiment=retrieve", "retriever=gsr")),
    Retriever("simgrag_gold", "SimGRAG, gold patterns (oracle)", ("+experiment=simgrag",), common=COMMON[:1]),
    Retriever("safe_gold", "SAFE, gold patterns (oracle)", ("+experiment=safe",), common=COMMON[:1]),
)


def command(r: Retriever) -> list[str]:
    """The run's command line after ``python`` (what the page and the JSON show)."""
    return ["train.py", *r.overrides, *r.common]


def launch(r: Retriever, runs: Path) -> float | None:
    """Run ``r`` into ``runs/r.name`` unless it has a metrics.json; its wall seconds (None: read)."""
    folder = runs / r.name
    if (folder / "metrics.json").exists():
        return None
    folder.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(ROOT / command(r)[0]), *command(r)[1:], f"hydra.run.dir={folder}"]
    print(f"running {r.name}: python {' '.join(command(r))}", flush=True)
    t0 = time.perf_counter()
    with open(runs / f"{r.name}.log", "w") as log:
        done = subprocess.run(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        print(f"{r.name} failed (exit status {done.returncode}): {runs / f'{r.name}.log'}", flush=True)
        return wall
    (folder / "bench_time.json").write_text(json.dumps({"wall_s": round(wall, 1)}))
    return wall


def read_row(r: Retriever, folder: Path) -> dict[str, Any] | None:
    """``r``'s figures from its run folder: recall of each metric at each K, the command, wall time."""
    from gsr_train.eval.tail import read_metrics

    path = folder / "metrics.json"
    if not path.exists():
        return None
    doc = read_metrics(path)
    rows = [row for row in doc["rows"] if "answer_recall@10" in (row.get("metrics") or {})]
    picked = [row for row in rows if r.method is None or row.get("method") == r.method]
    if not picked:
        raise SystemExit(f"{path}: no retrieval row" + (f" of method {r.method}" if r.method else ""))
    metrics, bounds = picked[0]["metrics"], picked[0].get("intervals") or {}
    timing = folder / "bench_time.json"
    return {
        "name": r.name,
        "label": r.label,
        "command": "python " + " ".join(command(r)),
        "split": picked[0].get("split"),
        "recall": {m: {str(k): metrics.get(f"{m}@{k}") for k in KS} for m in METRICS},
        "intervals": {m: {str(k): bounds.get(f"{m}@{k}") for k in KS} for m in METRICS},  # 95%, over questions
        "wall_s": json.loads(timing.read_text())["wall_s"] if timing.exists() else None,
    }


def markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The table: one line per retriever, answer and triple recall at each K (with its 95% interval
    over the questions, where the run has it), wall time."""
    from gsr_train.eval.intervals import format_cell
    from gsr_train.eval.markdown import markdown_table

    head = ["retriever"] + [f"{short}@{k}" for short in ("answer", "SP triples", "GPT triples") for k in KS]
    lines = []
    for row in rows:
        bounds = row.get("intervals") or {}
        cells = [
            format_cell(row["recall"][m].get(str(k)), (bounds.get(m) or {}).get(str(k))) for m in METRICS for k in KS
        ]
        wall = "-" if row.get("wall_s") is None else f"{row['wall_s']:.0f}"
        lines.append([row["label"], *cells, wall])
    return markdown_table([*head, "run (s)"], lines) + "\n"


def figure(rows: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """The PNG: a panel per recall metric, one line per retriever."""
    from gsr_train.eval.aggregate import plot_recall_at_k

    flat = [
        {"job": row["label"], **{f"{m}@{k}": v for m, per_k in row["recall"].items() for k, v in per_k.items()}}
        for row in rows
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    return plot_recall_at_k(flat, path)


def update_page(page: Path, table: str) -> bool:
    """Replace the table between the page's markers; whether the page was there to update."""
    if not page.exists():
        return False
    text = page.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{page}: no {BEGIN} ... {END} markers to put the table between")
    head, rest = text.split(BEGIN, 1)
    page.write_text(f"{head}{BEGIN}\n{table}{END}{rest.split(END, 1)[1]}")
    return True


def write_outputs(rows: list[dict[str, Any]], out: Path) -> None:
    """The figure, the JSON and the page's table, under ``out`` (the current folder)."""
    from gsr_train.io import write_json

    figure(rows, out / FIGURE)
    (out / NUMBERS).parent.mkdir(parents=True, exist_ok=True)
    write_json(out / NUMBERS, {"data": "webqsp_mini", "split": "test", "ks": list(KS), "retrievers": rows}, indent=1)
    table = markdown(rows)
    page = update_page(out / PAGE, table)
    print(table + f"wrote {FIGURE}, {NUMBERS}" + (f", the table of {PAGE}" if page else ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python bench/results_figure.py", description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--runs", default="outputs/results_figure", help="the run folders (one per retriever)")
    ap.add_argument("--only", nargs="*", choices=[r.name for r in RETRIEVERS], help="launch only these")
    args = ap.parse_args(argv)
    runs, out = Path(args.runs).resolve(), Path.cwd()
    failed = []
    for r in RETRIEVERS:
        if args.only is None or r.name in args.only:
            launch(r, runs)
        if not (runs / r.name / "metrics.json").exists():
            failed.append(r.name)
    rows = [row for r in RETRIEVERS if (row := read_row(r, runs / r.name)) is not None]
    if not rows:
        print(f"error: no run under {runs} has a metrics.json", file=sys.stderr)
        return 2
    write_outputs(rows, out)
    if failed:
        print(f"without figures (failed or not run): {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
