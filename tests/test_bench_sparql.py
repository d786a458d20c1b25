"""``bench/bench_sparql.py`` on a small KG: it runs to its table and JSON (at 20M triples it once divided by
a rate rounded to zero after 25 minutes), the slower way asked only the topics ``--before-questions`` gives;
its numpy KG writer writes the bytes of the first one (tests/oracles/bench_kg_reference.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import REPO, load_script, offline_env
from .oracles.bench_kg_reference import write_kg_reference
from .virtuoso import need_virtuoso


@pytest.mark.parametrize("triples", [1, 59, 3000, 20_000])
def test_the_kg_writer_writes_the_first_writers_bytes(tmp_path, monkeypatch, triples):
    """Written in blocks (of 7 lines here, to cross many block edges) and sorted by numpy: the same lines in
    the same order as the Python-sorted reference, so the 20M figures stand for the KG the bench writes."""
    bench = load_script(REPO / "bench" / "bench_sparql.py")
    monkeypatch.setattr(bench, "WRITE_ROWS", 7)
    ours, ref = tmp_path / "ours.nt", tmp_path / "ref.nt"
    assert bench.write_kg(ours, triples, seed=3) == write_kg_reference(ref, triples, seed=3)
    assert ours.read_bytes() == ref.read_bytes() and ours.stat().st_size > 0


@pytest.mark.integration
@pytest.mark.slow
def test_the_bench_cuts_the_stores_graphs_from_the_endpoint(tmp_path):
    need_virtuoso()
    out = tmp_path / "bench_sparql.json"
    argv = ["--triples", "3000", "--questions", "10", "--before-questions", "2", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_sparql.py"), *argv],
        cwd=REPO, env=offline_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    rows = {r["way"]: r for r in doc["rows"]}
    store, before = rows["store (data.kg=DIR)"], rows["endpoint, cold, LIMIT subqueries (before)"]
    cold, rerun = rows["endpoint, cold (data.kg=URL)"], rows["endpoint, cached (a rerun)"]
    assert doc["before_questions"] == before["questions"] == 2 < cold["questions"] == store["questions"]
    # no entity of a 3,000-triple KG has 9,999 edges: every graph from the endpoint is the store's, cut alike
    assert before["same_graph_as_store"] == cold["same_graph_as_store"] == rerun["same_graph_as_store"] == 1.0
    assert doc["cold_x_subqueries"] > 0 and all(r["questions_per_s"] > 0 for r in doc["rows"])
    assert doc["store_import_s"] > 0 and doc["peak_rss_mb"] > 0
