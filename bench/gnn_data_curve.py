"""GNN-RAG's answer Hit@1 against the number of training questions: is the fixture's data the limit?

    python bench/gnn_data_curve.py [--fractions 0.25,0.5,0.75,1] [--seeds 0,1,2] [--members 1]

Trains ``+experiment=gnnrag_webqsp_mini`` (through ``train.py``, as a user runs it) on nested random
subsets of webqsp_mini's training split (the same seeded shuffle, cut at each fraction; validation and
test untouched, so every point is scored on the same questions) for every seed, and prints, per
fraction: the training graphs, best validation Hit@1 and test Hit@1 (mean ± standard deviation over
the seeds with the 95% t interval of the mean), test answer recall@30, and the minutes and peak RSS of
a run. ``--members 1`` (default) trains one GNN per run, the cheap way to read the trend; ``--members
3`` is the shipped ensemble. Figures also go to ``bench/results/gnn_data_curve.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
SOURCE = ROOT.parent / "shared" / "data" / "webqsp_mini"


def subset_folder(source: Path, dest: Path, fraction: float, seed: int = 0) -> int:
    """``dest``: ``source``'s splits with the training split cut to ``fraction`` of its rows (a seeded
    shuffle, so a smaller fraction's rows are a prefix of a larger one's); every other file linked.
    Returns the training rows kept."""
    if not 0 < fraction <= 1:
        raise SystemExit(f"--fractions: {fraction} is not in (0, 1]")
    with gzip.open(source / "train.jsonl.gz", "rt") as f:
        rows = [line for line in f if line.strip()]
    random.Random(seed).shuffle(rows)
    kept = rows[: max(1, round(len(rows) * fraction))]
    dest.mkdir(parents=True, exist_ok=True)
    with gzip.open(dest / "train.jsonl.gz", "wt") as f:
        f.writelines(kept)
    for path in source.iterdir():
        if path.name != "train.jsonl.gz":
            (dest / path.name).symlink_to(path.resolve())
    return len(kept)


def run_point(data_dir: Path | None, seed: int, members: int, run_dir: Path) -> dict[str, Any]:
    """One training run of the shipped experiment; its figures from ``metrics.json``."""
    cmd = [sys.executable, "train.py", "+experiment=gnnrag_webqsp_mini", f"seed={seed}"]
    cmd += [f"retriever.options.members={members}", f"hydra.run.dir={run_dir}", "logger=csv"]
    if data_dir is not None:
        cmd.append(f"data.dir={data_dir}")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    start = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "%M", *cmd] if Path("/usr/bin/time").exists() else cmd,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    tail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    return point_figures(json.loads((run_dir / "metrics.json").read_text()), time.perf_counter() - start, tail)


def point_figures(metrics: dict[str, Any], seconds: float, rss_kb: str = "") -> dict[str, Any]:
    """The figures of one run's ``metrics.json``: graphs trained on, best validation Hit@1, test
    Hit@1 (the first answer node) and answer recall at the experiment's K."""
    ranking = metrics["answer_ranking"]["all"]
    row = metrics["rows"][0]
    return {
        "graphs": metrics["training"]["graphs"],
        "val_hit@1": metrics["training"]["best_score"],
        "test_hit@1": ranking["metrics"]["hit@1"],
        "test_hit@1_interval": ranking["intervals"]["hit@1"],
        "answer_recall": row["metrics"]["answer_recall"],
        "minutes": seconds / 60,
        "peak_rss_mb": int(rss_kb) / 1024 if rss_kb.isdigit() else None,
    }


def summarise(points: list[dict[str, Any]]) -> dict[str, Any]:
    """One fraction's runs (one per seed): each figure's mean, standard deviation and t interval."""
    from gsr_train.eval.intervals import seed_summary

    keys = ("val_hit@1", "test_hit@1", "answer_recall", "minutes", "peak_rss_mb")
    out: dict[str, Any] = {"graphs": points[0]["graphs"], "seeds": len(points)}
    for key in keys:
        out[key] = seed_summary(p[key] for p in points)
    return out


def cell(s: dict[str, Any]) -> str:
    if s["mean"] is None:
        return "-"
    if s["std"] is None:
        return f"{s['mean']:.3f}"
    return f"{s['mean']:.3f} ± {s['std']:.3f} ({s['low']:.2f}-{s['high']:.2f})"


def markdown(rows: dict[str, dict[str, Any]]) -> str:
    from gsr_train.eval.markdown import markdown_table

    header = ["train fraction", "graphs", "seeds", "val Hit@1", "test Hit@1", "test answer recall@30", "min/run"]
    header.append("peak RSS MB")
    body = [
        [f, str(r["graphs"]), str(r["seeds"]), cell(r["val_hit@1"]), cell(r["test_hit@1"]), cell(r["answer_recall"])]
        + [
            f"{r['minutes']['mean']:.1f}",
            "-" if r["peak_rss_mb"]["mean"] is None else f"{r['peak_rss_mb']['mean']:.0f}",
        ]
        for f, r in rows.items()
    ]
    return markdown_table(header, body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fractions", default="0.25,0.5,0.75,1")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--members", type=int, default=1)
    ap.add_argument("--source", default=str(SOURCE), help="a RoG folder with train/validation/test splits")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gnn_data_curve.json"))
    args = ap.parse_args()
    try:
        fractions = [float(x) for x in args.fractions.split(",")]
        seeds = [int(x) for x in args.seeds.split(",")]
    except ValueError as err:
        raise SystemExit(f"--fractions / --seeds: comma-separated numbers expected ({err})") from None
    source = Path(args.source)
    if not (source / "train.jsonl.gz").is_file():
        raise SystemExit(f"--source {source}: no train.jsonl.gz there")
    rows: dict[str, dict[str, Any]] = {}
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="gnn_data_curve_") as tmp:
        for fraction in fractions:
            folder = None
            if fraction < 1:
                folder = Path(tmp) / f"{source.name}_{round(fraction * 100)}"
                subset_folder(source, folder, fraction)
            key = f"{fraction:g}"
            runs[key] = [run_point(folder, s, args.members, Path(tmp) / f"run_{key}_{s}") for s in seeds]
            rows[key] = summarise(runs[key])
            print(
                f"fraction {key}: {rows[key]['graphs']} graphs, test Hit@1 {cell(rows[key]['test_hit@1'])}", flush=True
            )
    print(markdown(rows))
    from benchutil import save_figures

    save_figures(args.out, {"members": args.members, "seeds": seeds, "fractions": rows, "runs": runs})


if __name__ == "__main__":
    main()
