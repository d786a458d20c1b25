"""End-to-end GSR runner on a small embedded benchmark (one epoch of the tiny model)."""
from __future__ import annotations

import json

import pytest

from .conftest import compose_config


SMALL = ["num_people=120", "num_films=30", "num_cities=24", "num_regions=12", "num_countries=6",
         "num_organisations=12", "num_universities=6", "num_train=60", "num_validation=20", "num_test=20"]


@pytest.mark.slow
@pytest.mark.parametrize("head", ["token", "open"])
def test_runner_end_to_end(tmp_path, head):
    from gsr_train.models.gsr.modeling import load_gsr
    from gsr_train.runs.gsr import collect_metrics, metrics_table, run
    cfg = compose_config([
        "+experiment=gsr_quickstart", f"paths.output_dir={tmp_path}", f"paths.cache_dir={tmp_path / 'cache'}",
        "experiment_name=test", "model.epochs=1", "logger=none", "~callbacks.rich_progress",
        "trainer.enable_progress_bar=false", "gsr.decode.beams=4", f"model.relation_head={head}",
        *[f"+data.synthetic.{s}" for s in SMALL]])
    value = run(cfg)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert value == metrics["unconstrained"]["chain_match"]["match@3"]
    assert metrics["constrained"]["validity"]["valid_fraction"] == 1.0
    rows = [json.loads(line) for line in (tmp_path / "results_test_constrained.jsonl").read_text().splitlines()]
    assert len(rows) == 20 and all({"id", "triples", "scores", "chains", "paths", "beams"} <= set(r) for r in rows)
    assert all(b["valid"] for r in rows for b in r["beams"])
    gsr = load_gsr(tmp_path / "model")
    assert len(gsr.relations) == metrics["num_relations"]
    assert gsr.open_vocabulary == (head == "open") and gsr.spec["relation_head"] == head
    residual = "yes" if head == "open" else ""
    assert (f"| gsr_tiny | {head} | {residual} | kg | {float(cfg.gsr.index_ratio):.4f} | 0 | 0.0000 | raw | joint | "
            "constrained |") in metrics_table(collect_metrics(tmp_path))
