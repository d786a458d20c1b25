"""Start-up of the commands that answer before any work: a refused option, a missing input (data folder,
checkpoint, run folder), ``--help`` (of train.py and of every ``gsr-train`` verb), ``gsr-train options``.

Each command is a fresh process (``python train.py ...`` or ``python -m gsr_train.cli ...``) in an
empty folder with an empty cache; per command: the fastest wall time of ``--repeat`` runs, the
process's peak RSS (``wait4``), its exit status, the lines it wrote to stderr and whether it
imported torch (one more run under ``python -X importtime``). ``python -c "import torch"`` is the
reference row: what a command pays when its path imports torch. ``--baseline DIR`` runs the same
commands against another checkout (its ``train.py`` and ``src/``, e.g. a worktree of an older
commit) in the same session, for a before / after table on the same machine.

    .venv/bin/python bench/bench_startup.py [--repeat 3] [--baseline /path/to/older/checkout]

Writes the table and ``bench/results/bench_startup.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import save_figures
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
SG, GSR = "+experiment=subgraphrag_quickstart", "+experiment=gsr_quickstart"
KILLED = "killed_run"  # a run folder marked running that nobody holds (kill -9), made in every command's folder
FINISHED = "test_only_run"  # a finished run whose metrics.json has rows of the test split alone
METRICS_SCHEMA = "gsr-train/metrics/1"  # gsr_train.eval.schema.SCHEMA (the bench imports no gsr_train: --baseline)

RUN_CODE = "import gsr_train.runs.runners, gsr_train.runs.evaluate_run"
AS_A_COMMAND = (  # a checkout from before gsr_train.runtime.shutdown exits as Python does
    "try:\n    from gsr_train.runtime import shutdown; shutdown.install()\nexcept ImportError:\n    pass\n"
)

# (label, how it is run: train.py's arguments, or ["-m", "gsr_train.cli", ...], or ["-c", code])
COMMANDS: list[tuple[str, list[str]]] = [
    ("model.hiden=64", [SG, "model.hiden=64"]),
    ("subgraphrag.top_k=10", [SG, "subgraphrag.top_k=10"]),
    ("gsr.decode.top_n=5", [GSR, "gsr.decode.top_n=5"]),
    ("gsr.decod=3", [GSR, "gsr.decod=3"]),
    ("model.train.lr=abc", [SG, "model.train.lr=abc"]),
    ("eval_ks=[]", [SG, "eval_ks=[]"]),
    ("model=gsr_tiny (SubgraphRAG)", [SG, "model=gsr_tiny"]),
    ("data=nosuch", [SG, "data=nosuch"]),
    ("encoder=nosuch", [SG, "encoder=nosuch"]),
    ("llm-label-triples limitt=3", ["-m", "gsr_train.cli", "llm-label-triples", "limitt=3"]),
    ("data.dir=<missing folder>", [SG, "data.dir=./no_such_data"]),
    ("resume=<missing checkpoint>", [SG, "resume=./gone/last.ckpt"]),
    ("eval.py ckpt_path=<missing>", ["eval.py", "ckpt_path=./nope.ckpt"]),
    ("eval.py (no ckpt_path)", ["eval.py"]),
    (
        "eval.py +experiment=cosine_baseline data.dir=<missing>",
        ["eval.py", "+experiment=cosine_baseline", "data.dir=./nope"],
    ),
    ("compare <missing folders>", ["-m", "gsr_train.cli", "compare", "nowhere", "nowhere_b"]),
    ("aggregate <missing folder>", ["-m", "gsr_train.cli", "aggregate", "nowhere"]),
    ("explore <missing run folder>", ["-m", "gsr_train.cli", "explore", "nowhere"]),
    ("export <missing source>", ["-m", "gsr_train.cli", "export", "nowhere", "out"]),
    ("recall --data <missing>", ["-m", "gsr_train.cli", "recall", "--data", "./nowhere", "--results", "r.jsonl"]),
    ("build-index --data <missing>", ["-m", "gsr_train.cli", "build-index", "--data", "./nowhere"]),
    ("link --data <missing>", ["-m", "gsr_train.cli", "link", "--data", "./nowhere", "--kg", "kg"]),
    ("import-kg <missing file>", ["-m", "gsr_train.cli", "import-kg", "kg.tsv", "--out", "kg"]),
    ("explore <a killed run>", ["-m", "gsr_train.cli", "explore", KILLED]),
    ("explore --split <a split the run lacks>", ["-m", "gsr_train.cli", "explore", FINISHED, "--split", "val"]),
    ("publish <no model card>", ["-m", "gsr_train.cli", "publish", KILLED, "--repo_id", "me/x", "--dry_run"]),
    ("export --kind <wrong>", ["-m", "gsr_train.cli", "export", KILLED, "out", "--kind", "gnn"]),
    ("+experiment=... --help", [SG, "--help"]),
    ("gsr-train options NAME", ["-m", "gsr_train.cli", "options", "subgraphrag_quickstart"]),
    ("reference: import torch", ["-c", "import torch"]),
    # what train.py / eval.py import before a run's first step, and the process's exit: the floor of
    # every real run's wall time; then the same with the exit a command has (gsr_train.runtime.shutdown)
    ("reference: a run's code", ["-c", RUN_CODE]),
    ("reference: a run's code, exit as a command", ["-c", AS_A_COMMAND + RUN_CODE]),
]


def verb_helps() -> list[tuple[str, list[str]]]:
    """``gsr-train VERB --help`` for every verb (issue 49: each under a second)."""
    sys.path.insert(0, str(REPO / "src"))
    from gsr_train.cli import VERBS

    return [(f"{verb} --help", ["-m", "gsr_train.cli", verb, "--help"]) for verb in VERBS]


def _argv(tree: Path, args: list[str], flags: tuple[str, ...] = ()) -> list[str]:
    if args[0] in ("-m", "-c"):
        return [sys.executable, *flags, *args]
    if args and args[0] == "eval.py":
        return [sys.executable, *flags, str(tree / "eval.py"), *args[1:]]
    return [sys.executable, *flags, str(tree / "train.py"), *args]


def _env(tree: Path, cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(tree / "src"),
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "GSR_TRAIN_CACHE": str(cache),
    }


def run_once(argv: list[str], env: dict[str, str], cwd: Path) -> dict:
    """One process: wall seconds, peak RSS (MB), exit status, stderr."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    return {"seconds": wall, "rss_mb": round(usage.ru_maxrss / 1024, 1), "exit": proc.returncode, "stderr": stderr}


def _folder(path: Path) -> Path:
    """A command's empty working folder, with the killed run some commands are given."""
    (path / KILLED).mkdir(parents=True)
    (path / KILLED / "run.json").write_text(json.dumps({"status": "running", "experiment": "x"}))
    (path / FINISHED).mkdir()
    (path / FINISHED / "run.json").write_text(json.dumps({"status": "finished", "experiment": "x"}))
    row = {"method": "subgraphrag", "split": "test", "k": 10, "metrics": {"answer_recall@10": 0.5}}
    (path / FINISHED / "metrics.json").write_text(json.dumps({"schema": METRICS_SCHEMA, "rows": [row]}))
    return path


def measure(tree: Path, args: list[str], repeat: int, work: Path) -> dict:
    """The fastest of ``repeat`` runs of one command against the checkout ``tree``, and what it imported."""
    runs = []
    for i in range(repeat):
        folder = _folder(work / f"run{i}")
        runs.append(run_once(_argv(tree, args), _env(tree, folder / "cache"), folder))
    best = min(runs, key=lambda r: r["seconds"])
    _folder(work / "imports")
    traced = run_once(_argv(tree, args, ("-X", "importtime")), _env(tree, work / "imports" / "cache"), work / "imports")
    imported = {
        line.rsplit("|", 1)[1].strip().split(".", 1)[0]
        for line in traced["stderr"].splitlines()
        if line.startswith("import time:")
    }
    lines = [line for line in best["stderr"].splitlines() if line.strip()]
    return {
        "seconds": round(best["seconds"], 3),
        "seconds_all": [round(r["seconds"], 3) for r in runs],
        "rss_mb": best["rss_mb"],
        "exit": best["exit"],
        "stderr_lines": len(lines),
        "first_line": lines[0] if lines else "",
        "imports_torch": "torch" in imported,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="runs per command (the fastest is reported)")
    p.add_argument("--baseline", help="another checkout (train.py + src/) measured the same way, e.g. before a change")
    p.add_argument("--out", help="the JSON file (default: bench/results/bench_startup[_ONLY].json)")
    p.add_argument("--only", help="only the commands whose label contains this text (e.g. reference)")
    args = p.parse_args()
    slug = "".join(c if c.isalnum() else "_" for c in args.only).strip("_") if args.only else ""
    args.out = args.out or str(REPO / "bench" / "results" / f"bench_startup{'_' + slug if slug else ''}.json")
    trees = {"now": REPO}
    if args.baseline:
        trees = {"baseline": Path(args.baseline).resolve(), **trees}
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        for n, (label, command) in enumerate(COMMANDS + verb_helps()):
            if args.only and args.only not in label:
                continue
            row: dict = {"command": label, "argv": command}
            for name, tree in trees.items():
                row[name] = measure(tree, command, args.repeat, Path(tmp) / f"{n}_{name}")
                print(f"{label:32s} {name:8s} {row[name]['seconds']:6.2f} s", file=sys.stderr)
            rows.append(row)
    table = Table(title=f"start-up before any work (best of {args.repeat}, {os.cpu_count()} cores)")
    table.add_column("command")
    for name in trees:
        for column in ("s", "peak RSS MB", "exit", "stderr lines", "torch"):
            table.add_column(f"{name} {column}" if len(trees) > 1 else column, justify="right")
    for row in rows:
        cells = []
        for name in trees:
            m = row[name]
            cells += [f"{m['seconds']:.2f}", f"{m['rss_mb']:.0f}", str(m["exit"]), str(m["stderr_lines"])]
            cells.append("yes" if m["imports_torch"] else "no")
        table.add_row(row["command"], *cells)
    Console(width=200).print(table)
    doc = {
        "what": "wall seconds (best of repeat) and peak RSS of commands that answer before any work",
        "repeat": args.repeat,
        "trees": {k: str(v) for k, v in trees.items()},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "rows": rows,
    }
    save_figures(args.out, doc)


if __name__ == "__main__":
    main()
