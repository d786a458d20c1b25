"""The test suite's time and where its CPU goes: test modules, tests, and the processes the tests start.

The suite is CPU-bound (its two workers keep two cores busy), so what shortens it is less work, not
more workers; this says which work. It runs the README's test command (``python -m pytest -n 2``;
``--workers N``, and pytest's own arguments after ``--``) with a JUnit report and a process log:
every Python process started below it records its command and wall time when it exits (a
``sitecustomize`` on ``PYTHONPATH``; a process killed by a signal leaves no record).

    python bench/bench_suite.py [--workers 2] [--top 15] [--out FILE] [--cold] [-- PYTEST ARGS]

Prints the tables and writes bench/results/bench_suite.json: the wall time, the CPU time of every
process below it (user + system) and its ratio to the wall time (2.0: two cores busy throughout),
the tests' seconds by module and the slowest tests, and the started processes grouped by command
(``train.py``, ``eval.py``, ``gsr-train VERB``, a script) with their count and wall seconds. The
xdist workers (``python -c``) and pytest itself hold the tests' own time and are listed apart.
The tests start their commands warm (forked from an interpreter with torch imported:
``tests/warm_python.py``); ``--cold`` starts each in a fresh interpreter, for the before / after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import benchutil

ROOT = benchutil.use_checkout_src()
LOG_ENV = "GSR_SUITE_PROCLOG"
RECORDER = f"""
import atexit, json, os, sys, time
_T0, _PID = time.time(), os.getpid()


def _record():
    log = os.environ.get({LOG_ENV!r})  # read at exit: a command forked warm has its own environment
    if not log or os.getpid() != _PID:  # a forked child that exits normally: not a command of its own
        return
    line = json.dumps({{"argv": sys.argv[:2], "wall": round(time.time() - _T0, 3)}})
    with open(log, "a") as f:
        f.write(line + "\\n")


def gsr_suite_restart():  # a command forked from the tests' warm interpreter (tests/warm_python.py)
    global _T0, _PID
    _T0, _PID = time.time(), os.getpid()


atexit.register(_record)
"""
TEST_PROCESSES = ("pytest", "python -c")  # the workers and pytest: the tests' own time, not a command


def command_of(argv: list[str]) -> str:
    """What a process ran, as a group: ``train.py``, ``gsr-train VERB``, ``pytest`` (``-m``), ``python -c``."""
    if not argv or argv[0] in ("", "-c"):
        return "python -c"
    path = Path(argv[0])
    name = path.parent.name if path.name == "__main__.py" else path.name
    if name in ("gsr-train", "cli.py") and len(argv) > 1:
        return f"gsr-train {argv[1]}"
    return name


def processes(log: Path) -> dict[str, dict]:
    """The log's processes by command: count and wall seconds, the most first."""
    count: dict[str, int] = defaultdict(int)
    wall: dict[str, float] = defaultdict(float)
    for line in log.read_text().splitlines() if log.exists() else []:
        rec = json.loads(line)
        count[command_of(rec["argv"])] += 1
        wall[command_of(rec["argv"])] += rec["wall"]
    ranked = sorted(wall, key=lambda c: -wall[c])
    return {c: {"count": count[c], "wall_s": round(wall[c], 3)} for c in ranked}


def test_times(junit: Path, top: int) -> dict:
    """The report's tests: counts, the seconds they took in all, by module, and the slowest ``top``."""
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    by_module: dict[str, float] = defaultdict(float)
    tests, failures = [], []
    for case in cases:
        seconds = float(case.get("time") or 0.0)
        module = (case.get("classname") or "?").split(".")
        by_module[module[1] if len(module) > 1 else module[0]] += seconds
        name = f"{module[-1]}::{case.get('name')}"
        tests.append((seconds, name))
        if case.find("failure") is not None or case.find("error") is not None:
            failures.append(name)
    failed = len(failures)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    return {
        "tests": len(cases),
        "passed": len(cases) - failed - skipped,
        "failed": failed,
        "failures": failures,  # which: a slow run that failed is not rerun to find out
        "skipped": skipped,
        "test_seconds": round(sum(s for s, _ in tests), 1),
        "by_module": {m: round(s, 1) for m, s in sorted(by_module.items(), key=lambda kv: -kv[1])[:top]},
        "slowest": {name: round(s, 1) for s, name in sorted(tests, reverse=True)[:top]},
    }


def run_suite(workers: int, pytest_args: list[str], work: Path, cold: bool = False) -> dict:
    """The suite once, timed, with the process log on; its figures."""
    (work / "sitecustomize.py").write_text(RECORDER)
    log, junit = work / "processes.jsonl", work / "junit.xml"
    env = {**os.environ, LOG_ENV: str(log), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    env.pop("GSR_TEST_COLD", None)
    if cold:  # every command the tests start in a fresh interpreter, not forked warm (tests/warm_python.py)
        env["GSR_TEST_COLD"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(work), env.get("PYTHONPATH", "")) if p)
    command = ["-m", "pytest", *(["-n", str(workers)] if workers else []), "-q", *pytest_args]
    argv = [sys.executable, *command, f"--junitxml={junit}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if not junit.exists():
        raise SystemExit(f"pytest wrote no report (exit {done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return {
        "command": " ".join(["GSR_TEST_COLD=1"] * cold + ["python", *command]),
        "start": "cold" if cold else "warm",
        "exit": done.returncode,
        "summary": (done.stdout.strip().splitlines() or [""])[-1],
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "cpu_per_wall": round(cpu / wall, 2),
        "processes": processes(log),
    }


def table(doc: dict) -> str:
    """The figures as markdown: the run, the modules, the slowest tests, the commands the tests start."""
    lines = [
        f"`{doc['command']}`: {doc['summary']}",
        f"wall {doc['wall_s']} s, CPU {doc['cpu_s']} s ({doc['cpu_per_wall']} cores busy on average), "
        f"tests' own seconds {doc['test_seconds']}",
        *(f"failed: {name}" for name in doc["failures"]),
        "",
        "| test module | seconds |",
        "|---|---:|",
        *(f"| {m} | {s:.0f} |" for m, s in doc["by_module"].items()),
        "",
        "| slowest test | seconds |",
        "|---|---:|",
        *(f"| {t} | {s:.0f} |" for t, s in doc["slowest"].items()),
        "",
        "| command the tests start | processes | wall s |",
        "|---|---:|---:|",
    ]
    started = {c: g for c, g in doc["processes"].items() if c not in TEST_PROCESSES}
    lines += [f"| {c} | {g['count']} | {g['wall_s']:.0f} |" for c, g in started.items()]
    total = sum(g["wall_s"] for g in started.values())
    lines.append(f"| all of them | {sum(g['count'] for g in started.values())} | {total:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2, help="pytest -n (0: no xdist)")
    p.add_argument("--top", type=int, default=15, help="rows of the module and test tables")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "bench_suite.json"))
    p.add_argument("--cold", action="store_true", help="GSR_TEST_COLD=1: every command a fresh interpreter")
    p.add_argument("pytest_args", nargs="*", help="after --: pytest's own arguments (default: every test)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_suite-") as work:
        doc = run_suite(args.workers, args.pytest_args, Path(work), cold=args.cold)
        doc.update(test_times(Path(work) / "junit.xml", args.top))
    print(table(doc))
    benchutil.save_figures(args.out, doc)
    return doc


if __name__ == "__main__":
    sys.exit(0 if main()["exit"] == 0 else 1)
