"""End-to-end reader table: one reader recipe, every evidence source (issue: GNN-RAG joins).

    .venv/bin/python bench/bench_e2e_readers.py --subgraphrag <run>/checkpoints/best-XX.ckpt \\
        --gsr <gsr run>/model --gnn <gnn run>/checkpoints/best-XX.ckpt --out /tmp/e2e

Each row is one ``python train.py +experiment=reader_webqsp_mini`` run (SmolLM2-135M, bf16 LoRA,
the experiment's steps unless ``--steps``), in the ``paths`` prompt format for every source, so
rows differ only in their evidence: cosine, SubgraphRAG triples, GSR paths, GNN paths, GNN + GSR
and GNN + SubgraphRAG (``qa.retrieval.sources``: merged in turn within the same token budget),
and closed book (trained and asked without evidence). Each evidence row also reports answering
with its evidence alone (``retrieval_answers``: the top candidate entity, no reader). Rows whose
run folder already holds a ``metrics.json`` are read, not run again, so a killed table resumes.
Prints the table (Hit / Hit@1 / Macro-F1 on webqsp_mini test, wall and CPU seconds per row) and
writes bench/results/bench_e2e_readers.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ROWS = ("closed_book", "cosine", "subgraphrag", "gsr", "gnn", "gnn+gsr", "gnn+subgraphrag")
METRICS = ("hit", "hit@1", "macro_f1")


def evidence_overrides(row: str, args: argparse.Namespace) -> list[str]:
    """The Hydra overrides that give ``row`` its evidence."""
    gnn = f"{{label: gnn, retriever: trained, options: {{checkpoint: '{args.gnn}'}}}}"
    gsr = f"{{label: gsr, retriever: gsr, options: {{model: '{args.gsr}'}}}}"
    sgr = f"{{label: subgraphrag, checkpoint: '{args.subgraphrag}'}}"
    return {
        "closed_book": ["top_k=0"],
        "cosine": ["qa.retrieval.retriever=cosine"],
        "subgraphrag": [f"qa.retrieval.checkpoint={args.subgraphrag}"],
        "gsr": ["qa.retrieval.retriever=gsr", f"qa.retrieval.options={{model: '{args.gsr}'}}"],
        "gnn": ["qa.retrieval.retriever=trained", f"qa.retrieval.options={{checkpoint: '{args.gnn}'}}"],
        "gnn+gsr": [f"qa.retrieval.sources=[{gnn},{gsr}]"],
        "gnn+subgraphrag": [f"qa.retrieval.sources=[{gnn},{sgr}]"],
    }[row]


def run_row(row: str, args: argparse.Namespace) -> dict:
    """Run (or read back) one row; its figures."""
    folder = Path(args.out) / row.replace("+", "_and_")
    metrics_file = folder / "metrics.json"
    wall = cpu = None
    if not metrics_file.exists():
        command = [
            sys.executable,
            str(ROOT / "train.py"),
            "+experiment=reader_webqsp_mini",
            "qa.format=paths",
            "qa.eval.variants.base=[]",
            "qa.eval.variants.finetuned=[retrieved]",
            f"hydra.run.dir={folder}",
            *([f"qa.train.max_steps={args.steps}"] if args.steps else []),
            *evidence_overrides(row, args),
        ]
        print("running", row, ":", " ".join(command[2:]), flush=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        (folder / "bench_time.json").write_text(json.dumps({"wall_s": wall, "cpu_s": cpu}))
    elif (folder / "bench_time.json").exists():
        times = json.loads((folder / "bench_time.json").read_text())
        wall, cpu = times["wall_s"], times["cpu_s"]
    doc = json.loads(metrics_file.read_text())
    if wall is None:  # a row run by hand: its own wall time, CPU time unknown
        wall = (doc.get("timings") or {}).get("total_s")
    reader = doc["metrics"]["finetuned_retrieved"]["all"]["metrics"]
    alone = (doc.get("retrieval_answers") or {}).get("all", {}).get("metrics") if row != "closed_book" else None
    return {
        "row": row,
        "reader": {m: reader[m] for m in METRICS},
        "retrieval_answers": {m: alone[m] for m in METRICS} if alone else None,
        "evidence": doc["retrieval"].get("test", {}).get("evidence"),
        "steps": doc["train"].get("steps"),
        "wall_s": round(wall, 1) if wall is not None else None,
        "cpu_s": round(cpu, 1) if cpu is not None else None,
        "run": str(folder),
    }


def table(rows: list[dict]) -> str:
    head = "| evidence | reader Hit | Hit@1 | Macro-F1 | retrieval alone Hit@1 | Macro-F1 | wall s | CPU s |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        a = r["retrieval_answers"]
        fig = [f"{r['reader'][m] * 100:.1f}" for m in METRICS]  # the QA metrics are fractions
        alone = [f"{a[m] * 100:.1f}" for m in ("hit@1", "macro_f1")] if a else ["-", "-"]
        times = [f"{r[k]:.0f}" if r[k] is not None else "-" for k in ("wall_s", "cpu_s")]
        lines.append(f"| {r['row']} | " + " | ".join([*fig, *alone, *times]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--subgraphrag", help="a SubgraphRAG checkpoint trained on webqsp_mini")
    p.add_argument("--gsr", help="a saved GSR model folder (<gsr run>/model)")
    p.add_argument("--gnn", help="a GNN-RAG checkpoint (+experiment=gnnrag_webqsp_mini)")
    p.add_argument("--out", required=True, help="folder of the row runs (rows already there are read back)")
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {','.join(ROWS)}")
    p.add_argument("--steps", type=int, default=None, help="reader optimizer steps (default: the experiment's)")
    p.add_argument("--json", default=str(ROOT / "bench" / "results" / "bench_e2e_readers.json"))
    args = p.parse_args(argv)
    wanted = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in wanted if r not in ROWS]
    if unknown:
        p.error(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
    for name, is_there in (("subgraphrag", Path.is_file), ("gsr", Path.is_dir), ("gnn", Path.is_file)):
        needed = [r for r in wanted if name in r.split("+")]
        if needed and not (getattr(args, name) and is_there(Path(getattr(args, name)))):
            p.error(
                f"rows {', '.join(needed)} need --{name} (a {'folder' if name == 'gsr' else 'checkpoint'}), "
                f"got {getattr(args, name)}"
            )
    rows = []
    for row in wanted:
        rows.append(run_row(row, args))
        print(table(rows), flush=True)
    from benchutil import save_figures

    save_figures(args.json, {"rows": rows, "steps": args.steps, "split": "test", "data": "webqsp_mini"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
