"""The Hydra experiments ``simgrag`` / ``safe`` compose and run end to end on a tiny dataset."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.patterns_helpers import tiny_dataset

from .conftest import compose_config


@pytest.mark.parametrize(
    "experiment,extra", [("simgrag", ["simgrag.k_node=4"]), ("safe", ["safe.delta=0", "safe.k_qg=2"])]
)
def test_experiment_runs_on_tiny_data(tmp_path, experiment, extra):
    from gsr_train.runs.patterns import run_safe, run_simgrag

    data = tiny_dataset(tmp_path / "data")
    cfg = compose_config(
        [
            f"+experiment={experiment}",
            f"paths.output_dir={tmp_path / 'out'}",
            f"paths.cache_dir={tmp_path / 'c'}",
            "experiment_name=test",
            f"data.dir={data}",
            "data.splits=[test]",
            "data.name=tiny",
            "encoder.name=hashing",
            *extra,
        ]
    )
    result = (run_simgrag if experiment == "simgrag" else run_safe)(cfg)
    assert result["method"] == f"{experiment}-gold" and result["search"]["questions"] == 2
    assert result["metrics"]["overall"]["answer_recall"]["10"] == pytest.approx(1.0)
    rows = [json.loads(x) for x in gzip.open(tmp_path / "out" / "results_test.jsonl.gz", "rt").read().splitlines()]
    assert [r["id"] for r in rows] == ["q1", "q2"] and all(r["subgraphs"] and r["patterns"] for r in rows)
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert saved["config"][("k_node" if experiment == "simgrag" else "delta")] == (4 if experiment == "simgrag" else 0)
