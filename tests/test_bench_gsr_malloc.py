"""bench/bench_gsr_malloc.py's verdict: two runs agree when their figures and results files do, whatever
their timings (``*_seconds``, ``*_s``) say."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from .conftest import REPO, load_script


def _bench():
    return load_script(REPO / "bench" / "bench_gsr_malloc.py")


def _run(folder: Path, recall: float, seconds: float, rows: list[str]) -> Path:
    folder.mkdir()
    doc = {"metrics": {"match@1": recall}, "train_seconds": seconds, "training": {"train_s": seconds}}
    (folder / "metrics.json").write_text(json.dumps(doc))
    with gzip.open(folder / "results_test.jsonl.gz", "wt") as f:
        f.write("\n".join(rows))
    return folder


def test_runs_agree_on_figures_and_results_whatever_their_timings(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    same = _bench().same_figures
    a = _run(tmp_path / "a", 0.5, 95.3, ["q1"])
    assert same(a, _run(tmp_path / "b", 0.5, 69.2, ["q1"]))
    assert not same(a, _run(tmp_path / "c", 0.6, 95.3, ["q1"]))  # another figure
    assert not same(a, _run(tmp_path / "d", 0.5, 95.3, ["q2"]))  # another results file
    bare = _run(tmp_path / "e", 0.5, 95.3, [])
    (bare / "results_test.jsonl.gz").unlink()
    assert not same(bare, bare)  # no results file to compare: no verdict of sameness
