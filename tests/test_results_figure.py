"""The results figure (docs/explanations/results.md): bench/results_figure.py turns the runs'
metrics.json into the figure, the JSON and the page's table. Checked on a tiny fake set of run
folders (no training), and the page's command is run as written in a fresh checkout."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gsr_train.eval.tail import metrics_row, write_metrics

from .conftest import REPO

PAGE = "docs/explanations/results.md"
PNG = b"\x89PNG\r\n\x1a\n"


def _bench():
    spec = importlib.util.spec_from_file_location("results_figure", REPO / "bench" / "results_figure.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _fake_runs(runs: Path, bench) -> dict[str, float]:
    """One run folder per retriever, its metrics.json as a run writes it; answer_recall@10 by name."""
    at10 = {}
    for i, r in enumerate(bench.RETRIEVERS):
        base = 0.1 + 0.05 * i
        at10[r.name] = base
        metrics = {f"answer_recall@{k}": min(1.0, base + 0.1 * j) for j, k in enumerate(bench.KS)}
        metrics |= {f"sp_recall@{k}": base / 2 for k in bench.KS}
        if r.name != "ppr":  # a run without labels: its GPT column is empty
            metrics |= {f"labelled_recall@{k}": base / 3 for k in bench.KS}
        rows = [metrics_row(r.method or r.name, "test", 100, metrics)]
        if r.method:  # a run with another method's row first (SubgraphRAG's cosine comparison)
            rows.insert(0, metrics_row("cosine", "test", 100, {"answer_recall@10": 0.99}))
        folder = runs / r.name
        folder.mkdir(parents=True)
        write_metrics(folder, r.name, "webqsp_mini", None, rows)
        (folder / "bench_time.json").write_text(json.dumps({"wall_s": 10.0 * (i + 1)}))
    return at10


def test_rows_table_and_figure_from_fake_runs(tmp_path):
    bench = _bench()
    at10 = _fake_runs(tmp_path / "runs", bench)
    rows = [bench.read_row(r, tmp_path / "runs" / r.name) for r in bench.RETRIEVERS]
    assert [row["recall"]["answer_recall"]["10"] for row in rows] == [at10[r.name] for r in bench.RETRIEVERS]
    sgr = next(row for row in rows if row["name"] == "subgraphrag")
    assert sgr["recall"]["answer_recall"]["10"] != 0.99  # its own row, not the cosine comparison's
    assert sgr["command"] == "python train.py +experiment=subgraphrag_webqsp_mini subgraphrag.compare_cosine=false " + (
        "data=webqsp_mini top_k=100"
    )
    table = bench.markdown(rows).splitlines()
    assert len(table) == 2 + len(bench.RETRIEVERS)
    ppr = next(line for line in table if line.startswith("| PPR"))
    assert ppr.split(" | ")[1] == f"{at10['ppr']:.3f}" and ppr.count("| - ") == len(bench.KS)
    assert table[2].endswith("| 10 |")  # wall seconds of the first
    # a run with per-question values: its cells carry their 95% intervals
    bounded = {**rows[0], "intervals": {"answer_recall": {"10": [0.08, 0.13]}}}
    assert (
        bench.markdown([bounded])
        .splitlines()[2]
        .startswith(f"| {rows[0]['label']} | {at10['cosine']:.3f} (0.08-0.13) |")
    )
    png = bench.figure(rows, tmp_path / "fig" / "recall.png")
    assert png is not None and png.read_bytes().startswith(PNG)


def test_a_missing_row_is_named(tmp_path):
    bench = _bench()
    folder = tmp_path / "subgraphrag"
    folder.mkdir()
    write_metrics(folder, "x", "webqsp_mini", None, [metrics_row("cosine", "test", 100, {"answer_recall@10": 0.5})])
    r = next(r for r in bench.RETRIEVERS if r.name == "subgraphrag")
    with pytest.raises(SystemExit, match="no retrieval row of method subgraphrag"):
        bench.read_row(r, folder)
    assert bench.read_row(r, tmp_path / "nothing") is None


def _page_command() -> str:
    text = (REPO / PAGE).read_text()
    blocks = re.findall(r"<!-- ran by: (\S+) -->\n```bash\n(.*?)```", text, re.S)
    assert [b[0] for b in blocks] == ["tests/test_results_figure.py::test_the_page_command_runs_as_written"]
    return blocks[0][1].strip()


def test_the_page_command_runs_as_written(tmp_path):
    """In a fresh checkout whose run folders already hold metrics.json, the page's command writes the
    figure, the numbers and the page's table from them (and launches nothing)."""
    bench = _bench()
    for name in ("train.py", "conf", "bench"):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / PAGE).parent.mkdir(parents=True)
    (tmp_path / PAGE).write_text((REPO / PAGE).read_text())
    at10 = _fake_runs(tmp_path / "outputs" / "results_figure", bench)
    words = shlex.split(_page_command())
    assert words[0] == "python"
    done = subprocess.run([sys.executable, *words[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "running" not in done.stdout
    assert (tmp_path / bench.FIGURE).read_bytes().startswith(PNG)
    numbers = json.loads((tmp_path / bench.NUMBERS).read_text())
    assert [r["recall"]["answer_recall"]["10"] for r in numbers["retrievers"]] == list(at10.values())
    page = (tmp_path / PAGE).read_text()
    assert bench.markdown(numbers["retrievers"]) in page
    assert page.replace(bench.markdown(numbers["retrievers"]), "") == (REPO / PAGE).read_text().replace(
        _committed_table(bench), ""
    )


def _committed_table(bench) -> str:
    text = (REPO / PAGE).read_text()
    return text.split(bench.BEGIN + "\n", 1)[1].split(bench.END, 1)[0]


def test_the_committed_page_shows_the_committed_numbers():
    bench = _bench()
    numbers = json.loads((REPO / bench.NUMBERS).read_text())
    assert _committed_table(bench) == bench.markdown(numbers["retrievers"])
    assert (REPO / bench.FIGURE).read_bytes().startswith(PNG)
    assert f"]({Path('..') / bench.FIGURE.relative_to('docs')})" in (REPO / PAGE).read_text()
