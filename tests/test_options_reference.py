"""docs/reference/options.md: every option of every experiment, generated from the option
dataclasses (``gsr-train options --write_docs``); the committed page must be the generated one."""

from __future__ import annotations

import subprocess
import sys

from .conftest import REPO

PAGE = "docs/reference/options.md"


def test_the_options_page_is_generated_from_the_dataclasses():
    from gsr_train.options.reference import render_page

    text = render_page()
    assert (REPO / PAGE).read_text() == text, (
        f"{PAGE} differs from the option dataclasses: run gsr-train options --write_docs"
    )


def test_the_page_lists_every_option_with_its_default_and_every_experiment():
    from gsr_train.options.help import experiments
    from gsr_train.options.recipes import SubgraphRAGRun
    from gsr_train.options.reference import doc_rows

    text = (REPO / PAGE).read_text()
    for name in experiments():
        assert f"### `{name}`" in text, name
    row = next(r for r in doc_rows(SubgraphRAGRun, "subgraphrag") if r.key == "subgraphrag.eval_graphs_per_batch")
    assert (row.kind, row.default, row.range) == ("an integer", "128", ">= 1")
    assert "| `subgraphrag.eval_graphs_per_batch` | an integer | `128` | >= 1 |" in text
    # an experiment's own values, next to the default they replace
    cwq = text.split("### `subgraphrag_cwq`", 1)[1].split("###", 1)[0]
    assert "| `model.train.epochs` | `50` | `30` |" in cwq
    # a | inside a description is escaped, so it does not split the table's cell
    assert "null: a fresh run \\| auto:" in text


def test_write_docs_writes_the_page_where_asked(tmp_path):
    target = tmp_path / "options.md"
    run = lambda: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "gsr_train.cli", "options", "--write_docs", str(target)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    first = run()
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"wrote {target}"
    assert target.read_text() == (REPO / PAGE).read_text()
    again = run()
    assert again.stdout.strip() == f"{target} is current"
