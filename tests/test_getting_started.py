"""docs/getting-started.md runs as written: every command of its ```bash blocks, in order, in a fresh
checkout (``bash setup.sh`` and ``source .venv/bin/activate`` aside: this test runs in the environment
they make), with ``<time>`` replaced by the folder the command before it made."""

from __future__ import annotations

import json
import re

import pytest

from .doc_blocks import REPO, blocks, commands
from .test_readme_commands import _checkout, _env, _run

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PAGE = "docs/getting-started.md"
SETUP = ("bash setup.sh", "source .venv/bin/activate")


def test_getting_started_as_written(tmp_path, user_cache, cold_start):
    """The newcomer's walk-through, each command in a fresh interpreter (``cold_start``)."""
    lines = [line for body in blocks(PAGE) for line in commands(body)]
    assert lines[:2] == list(SETUP)
    cwd = _checkout(tmp_path / "checkout")
    env = _env(user_cache)
    done = {}
    for line in lines[2:]:
        proc = _run(line, cwd, env)
        assert proc.returncode == 0, (line, proc.stderr[-3000:])
        done[line] = proc
    quickstart, smaller = sorted((cwd / "outputs" / "subgraphrag_quickstart").iterdir())
    for run in (quickstart, smaller):
        assert json.loads((run / "run.json").read_text())["status"] == "finished"
    figure = r"answer recall@10 is \*\*(0\.\d{3})\*\* \(cosine:\s+(0\.\d{3})\)"
    shown = re.search(figure, REPO.joinpath(PAGE).read_text())
    assert shown, "the page no longer shows the quickstart's answer recall@10"
    figures = json.loads((quickstart / "metrics.json").read_text())["metrics"]
    printed = [figures[m]["overall"]["answer_recall"]["10"] for m in ("subgraphrag", "cosine")]
    # the figures the page shows, within what another CPU's kernels move them (the portable mode's
    # figure is checked to the last digit by tests/test_numerics.py)
    assert all(abs(p - float(s)) <= 0.005 for p, s in zip(printed, shown.groups())), (printed, shown.groups())
    assert json.loads((smaller / "metrics.json").read_text())["rows"][0]["k"] == 50
    options = done["gsr-train options subgraphrag_quickstart"].stdout
    assert "model.hidden" in options and "top_k" in options
    (sweep,) = (cwd / "multirun" / "retrieve").iterdir()
    table = (sweep / "aggregate.md").read_text()
    assert "| retriever |" in table
    assert sum(1 for row in table.splitlines() if row.startswith("| ") and "recall" not in row) >= 3
    assert (sweep / "aggregate_recall.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = done[next(line for line in done if line.startswith("gsr-train aggregate"))].stdout
    assert all(name in printed for name in ("cosine", "ppr", "pcst"))
