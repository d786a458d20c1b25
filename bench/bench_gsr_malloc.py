"""GSR on the CPU with glibc's default malloc against the kept freed memory it asks for, in the same run.

Each step of GSR's training makes its logits over the whole vocabulary (the tiny T5's 30.5k tokens
plus the relations), their log-softmax and their gradients; beam search scores beams x vocabulary at
each step. Those tensors are tens of MB, above glibc's mmap threshold (at most 32 MiB by default),
so glibc maps each one afresh and unmaps it on free, and the next step page-faults the same memory
in again. ``GSRModule.on_train_start`` and ``beam_chains`` ask glibc to keep freed blocks
(`gsr_train.memory.keep_freed_memory`, as SubgraphRAG's scoring does). This runs one GSR experiment
(default: the quickstart) twice in fresh processes, ``default`` with that request turned into a no-op
and ``kept`` as shipped, and prints wall and CPU seconds (user, system), minor page faults, peak RSS
and whether the two runs' figures and results files are the same bytes.

    python bench/bench_gsr_malloc.py [--experiment gsr_quickstart] [-- OVERRIDES]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import save_figures

REPO = Path(__file__).resolve().parents[1]
# a run in a fresh process that writes its own CPU seconds, page faults and peak RSS at exit; ``default``
# answers the request to keep freed memory without calling mallopt (glibc's defaults)
WRAPPER = """
import atexit, json, resource, runpy, sys
out, way = sys.argv[1], sys.argv[2]


def usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    doc = {"user_s": r.ru_utime, "system_s": r.ru_stime, "minor_faults": r.ru_minflt, "peak_rss_mb": r.ru_maxrss / 1024}
    with open(out, "w") as f:
        json.dump(doc, f)


atexit.register(usage)
if way == "default":
    import gsr_train.memory as m
    m.keep_freed_memory = lambda *a, **k: False
sys.argv = sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
WAYS = ("default", "kept")


def run(way: str, experiment: str, overrides: list[str], folder: Path, cache: str) -> dict:
    """One run in a fresh process: its wall and CPU seconds, page faults and peak RSS."""
    usage = folder.with_suffix(".usage.json")
    argv = [sys.executable, "-c", WRAPPER, str(usage), way, "train.py", f"+experiment={experiment}", *overrides]
    env = {**os.environ, "GSR_TRAIN_CACHE": cache, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    t0 = time.perf_counter()
    done = subprocess.run([*argv, f"hydra.run.dir={folder}"], cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{way}: exit {done.returncode}\n{done.stderr[-3000:]}")
    figures = json.loads(usage.read_text())
    return {"wall_s": round(wall, 1), **{k: v if k == "minor_faults" else round(v, 1) for k, v in figures.items()}}


def same_figures(a: Path, b: Path) -> bool:
    """The two runs' metrics (timings aside) and results files are the same."""

    def figures(folder: Path) -> dict:  # every timing key (``*_seconds``, ``*_s``) left out
        untimed = lambda d: {k: v for k, v in d.items() if not k.endswith(("seconds", "_s"))}  # noqa: E731
        return json.loads((folder / "metrics.json").read_text(), object_hook=untimed)

    results = sorted(p.name for p in a.glob("results_*.jsonl.gz"))
    return figures(a) == figures(b) and bool(results) and all(filecmp.cmp(a / n, b / n, False) for n in results)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--experiment", default="gsr_quickstart")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "bench_gsr_malloc.json"))
    p.add_argument("overrides", nargs="*", help="after --: the experiment's overrides")
    args = p.parse_args(argv)
    cache = os.environ.get("GSR_TRAIN_CACHE", str(REPO / ".cache"))
    with tempfile.TemporaryDirectory(prefix="bench_gsr_malloc-") as work:
        run("kept", args.experiment, args.overrides, Path(work) / "warm", cache)  # the cache built, not timed
        ways = {w: run(w, args.experiment, args.overrides, Path(work) / w, cache) for w in WAYS}
        same = same_figures(Path(work) / "default", Path(work) / "kept")
    doc = {
        "command": " ".join(["train.py", f"+experiment={args.experiment}", *args.overrides]),
        "ways": ways,
        "speedup_wall": round(ways["default"]["wall_s"] / ways["kept"]["wall_s"], 2),
        "same_figures": same,
    }
    print(f"`{doc['command']}` (CPU), glibc's default malloc against kept freed memory, same run")
    print("| way | wall s | user s | system s | minor faults | peak RSS MB |\n|---|---:|---:|---:|---:|---:|")
    for w, f in ways.items():
        print(f"| {w} | {f['wall_s']} | {f['user_s']} | {f['system_s']} | {f['minor_faults']:,} | {f['peak_rss_mb']} |")
    print(f"speed-up {doc['speedup_wall']}x; same figures and results files: {same}")
    save_figures(args.out, doc)
    return doc


if __name__ == "__main__":
    sys.exit(0 if main()["same_figures"] else 1)
