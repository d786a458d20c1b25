"""bench/gnn_data_curve.py: nested training subsets of a RoG folder, each run's figures, the seed summary."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "data" / "webqsp_mini"


def _bench():
    return load_script(ROOT / "bench" / "gnn_data_curve.py")


def _ids(folder: Path) -> list[str]:
    import json

    with gzip.open(folder / "train.jsonl.gz", "rt") as f:
        return [json.loads(line)["id"] for line in f if line.strip()]


def test_subsets_are_nested_and_leave_validation_and_test_alone(tmp_path):
    bench = _bench()
    total = len(_ids(SOURCE))
    n25 = bench.subset_folder(SOURCE, tmp_path / "a", 0.25)
    n50 = bench.subset_folder(SOURCE, tmp_path / "b", 0.5)
    assert n25 == round(total * 0.25) and n50 == round(total * 0.5)
    small, large = _ids(tmp_path / "a"), _ids(tmp_path / "b")
    assert len(small) == n25 and large[:n25] == small  # the smaller subset is a prefix of the larger
    assert set(large) <= set(_ids(SOURCE)) and len(set(large)) == len(large)
    for name in ("validation.jsonl.gz", "test.jsonl.gz"):
        linked = tmp_path / "a" / name
        assert linked.is_symlink() and linked.resolve() == (SOURCE / name).resolve()
    with pytest.raises(SystemExit, match="not in"):
        bench.subset_folder(SOURCE, tmp_path / "c", 1.5)


def test_figures_and_seed_summary():
    bench = _bench()
    metrics = {
        "training": {"graphs": 209, "best_score": 0.6},
        "answer_ranking": {"all": {"metrics": {"hit@1": 0.5}, "intervals": {"hit@1": [0.4, 0.6]}}},
        "rows": [{"metrics": {"answer_recall": 0.9}}],
    }
    points = []
    for hit in (0.5, 0.6, 0.7):
        metrics["answer_ranking"]["all"]["metrics"]["hit@1"] = hit
        points.append(bench.point_figures(metrics, 90.0, "2048"))
    assert points[0]["peak_rss_mb"] == 2.0 and points[0]["minutes"] == 1.5 and points[0]["graphs"] == 209
    row = bench.summarise(points)
    assert row["seeds"] == 3 and row["test_hit@1"]["mean"] == pytest.approx(0.6)
    assert row["test_hit@1"]["std"] == pytest.approx(0.1) and row["test_hit@1"]["low"] < 0.6 < row["test_hit@1"]["high"]
    table = bench.markdown({"0.25": row})
    assert (
        "| 0.25 | 209 | 3 | 0.600 ± 0.000 (0.60-0.60) | 0.600 ± 0.100 (0.35-0.85) | 0.900 ± 0.000 (0.90-0.90)"
        " | 1.5 | 2 |" in table
    )


def test_a_wrong_fraction_list_is_one_line():
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gnn_data_curve.py"), "--fractions", "a,b"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1 and "--fractions / --seeds" in out.stderr and "Traceback" not in out.stderr
