"""docs/explanations/reproduction.md: the rows that take seconds run as written, in a checkout, and the
page quotes each run's figure with the 95% interval its metrics.json row carries; the long rows'
``python train.py`` lines are composed by tests/test_doc_commands.py::test_train_lines_compose."""

from __future__ import annotations

import json
import subprocess

from .doc_blocks import block, blocks, commands, page_text
from .test_readme_commands import _argv, _checkout, _env

PAGE = "docs/explanations/reproduction.md"
QUOTED = {  # run folder -> the figures the page quotes from its metrics.json row
    "cosine": ("answer_recall@10", "answer_recall@100"),
    "simgrag": ("answer_recall@10",),
    "safe": ("answer_recall@10",),
}


def test_the_quick_rows_run_as_written(tmp_path, user_cache):
    body = block(PAGE, "retriever=cosine")
    checkout = _checkout(tmp_path / "work")
    env = _env(user_cache)
    for line in commands(body):
        done = subprocess.run(_argv(line, checkout), cwd=checkout, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
    page = page_text(PAGE)
    for name, figures in QUOTED.items():
        (row,) = json.loads((checkout / "outputs" / "reproduction" / name / "metrics.json").read_text())["rows"]
        for figure in figures:
            value, (low, high) = row["metrics"][figure], row["intervals"][figure]
            assert low <= value <= high
            quoted = f"{value:.3f} ({low:.2f}-{high:.2f})"
            assert quoted in page, f"{PAGE} does not quote {name}'s {figure} as the run gives it: {quoted}"


def test_the_count_intervals_are_the_pages(capsys):
    """The page's snippet (a 0/1 figure's interval from its count) prints the intervals the table quotes."""
    (snippet,) = blocks(PAGE, lang="python")
    exec(compile(snippet, PAGE, "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2  # the reader's Hit and Hit@1
    page = page_text(PAGE)
    for line in printed:
        quoted = line.split(" = ", 1)[1]
        assert quoted in page, f"{PAGE} does not quote {line}"
