"""bench/bench_suite.py on a suite of three tests: its counts, the module and test tables, and the
processes the tests start, each grouped by its command with its wall time."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SUITE = """
import os, subprocess, sys
from pathlib import Path

CHILD = str(Path(__file__).with_name("child_step.py"))


def test_starts_a_step():
    subprocess.run([sys.executable, CHILD], check=True)


def test_starts_another():
    subprocess.run([sys.executable, CHILD], check=True)
    pid = os.fork()  # a forked child exiting through sys.exit runs the exit hooks: no record of its own
    if pid == 0:
        sys.exit(0)
    os.waitpid(pid, 0)


def test_fails():
    assert 1 == 2
"""


def test_the_suite_bench_counts_tests_and_the_processes_they_start(tmp_path):
    suite = tmp_path / "tiny"
    suite.mkdir()
    (suite / "test_tiny.py").write_text(textwrap.dedent(SUITE))
    (suite / "child_step.py").write_text("import time\ntime.sleep(0.3)\n")
    out = tmp_path / "bench_suite.json"
    argv = [sys.executable, "bench/bench_suite.py", "--workers", "0", "--out", str(out), "--"]
    done = subprocess.run([*argv, str(suite), "-p", "no:cacheprovider"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr[-3000:]  # a failing test: the bench says so in its exit
    doc = json.loads(out.read_text())
    assert (doc["tests"], doc["passed"], doc["failed"], doc["skipped"]) == (3, 2, 1, 0)
    assert doc["failures"] == ["test_tiny::test_fails"] and "failed: test_tiny::test_fails" in done.stdout
    assert doc["exit"] == 1 and "1 failed, 2 passed" in doc["summary"]
    assert list(doc["by_module"]) == ["test_tiny"] and doc["test_seconds"] >= 0.6
    names = ("test_starts_a_step", "test_starts_another", "test_fails")
    assert set(doc["slowest"]) == {f"test_tiny::{n}" for n in names}
    step = doc["processes"]["child_step.py"]
    assert step["count"] == 2 and step["wall_s"] >= 0.6  # each child recorded once, with its own wall time
    assert doc["processes"]["pytest"]["count"] == 1  # the fork left no second record
    assert doc["wall_s"] >= doc["test_seconds"] and 0 < doc["cpu_per_wall"] <= 2.5
    assert "| child_step.py | 2 |" in done.stdout and "| pytest |" not in done.stdout
