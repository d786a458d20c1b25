"""docs/how-to/compare-runs.md runs as written: two quickstart runs compared, and a sweep over 3 seeds."""

from __future__ import annotations

import csv
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO
from .doc_blocks import blocks, commands

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PAGE = "docs/how-to/compare-runs.md"


def _argv(line: str) -> list[str]:
    words = shlex.split(line)
    if words[0] == "python":
        words[0] = sys.executable
    elif words[0] == "gsr-train":
        words = [sys.executable, "-m", "gsr_train.cli", *words[1:]]
    return words


def test_compare_runs_page(tmp_path, user_cache):
    cwd = tmp_path / "checkout"
    cwd.mkdir()
    for name in ("train.py", "eval.py", "conf"):
        (cwd / name).symlink_to(REPO / name)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
        "GSR_TRAIN_CACHE": str(user_cache),
    }
    lines = [line for body in blocks(PAGE) for line in commands(body)]
    assert len(lines) == 4 and lines[2].startswith("gsr-train compare")
    done = []
    for line in lines:
        proc = subprocess.run(_argv(line), cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, (line, proc.stderr[-3000:])
        done.append(proc)
    # the comparison: one table, every metric with its paired interval and p-value, and its JSON
    table = [x for x in done[2].stdout.splitlines() if x.startswith("| subgraphrag [test] | subgraphrag [test] |")]
    assert any("| answer_recall@10 | " in x for x in table), done[2].stdout
    doc = json.loads((cwd / "outputs/compare/three_epochs/compare_compare_one_epoch.json").read_text())
    (row,) = [r for r in doc["rows"] if r["a"] == "subgraphrag [test]"]
    m = next(x for x in row["metrics"] if x["metric"] == "answer_recall@10")
    assert m["questions"] == 300 and m["low"] <= m["diff"] <= m["high"] and 0 < m["p_value"] <= 1
    # each run's rows carry intervals
    figures = json.loads((cwd / "outputs/compare/one_epoch/metrics.json").read_text())
    low, high = figures["rows"][0]["intervals"]["answer_recall@10"]
    assert low <= figures["rows"][0]["metrics"]["answer_recall@10"] <= high
    # the seed sweep: the runs, then one row over the 3 seeds with mean, sd and interval, and the plot
    sweep = cwd / "multirun" / "seeds"
    seeds = list(csv.DictReader((sweep / "aggregate_seeds.csv").open()))
    model = next(r for r in seeds if r["method"] == "subgraphrag")
    assert model["seeds"] == "3" and float(model["answer_recall@10_low"]) <= float(model["answer_recall@10"])
    assert float(model["answer_recall@10_std"]) >= 0 and "## over seed" in (sweep / "aggregate.md").read_text()
    assert (sweep / "aggregate_recall.png").read_bytes()[:4] == b"\x89PNG"
    assert Path(sweep / "2" / "questions.jsonl").is_file()
