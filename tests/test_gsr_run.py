"""End-to-end GSR runner on a small embedded benchmark (one epoch of the tiny model)."""

from __future__ import annotations

import gzip
import json

import pytest

from gsr_train.eval.tail import in_run

from .conftest import compose_config, quiet

SMALL = [
    "num_people=120",
    "num_films=30",
    "num_cities=24",
    "num_regions=12",
    "num_countries=6",
    "num_organisations=12",
    "num_universities=6",
    "num_train=60",
    "num_validation=20",
    "num_test=20",
]


@pytest.mark.slow
@pytest.mark.parametrize("head", ["token", "open"])
def test_runner_end_to_end(tmp_path, head):
    from gsr_train.commands.gsr_table import collect_metrics, metrics_table
    from gsr_train.eval.chains import match_table
    from gsr_train.models.gsr.modeling import load_gsr
    from gsr_train.runs.gsr import run

    overrides = [
        "+experiment=gsr_quickstart",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "experiment_name=test",
        "model.epochs=1",
        *quiet(),
        "gsr.decode.beams=4",
        f"model.relation_head={head}",
        *[f"+data.synthetic.{s}" for s in SMALL],
    ]
    cfg = compose_config([*overrides, f"paths.output_dir={tmp_path}"])
    value = run(cfg)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert value == metrics["unconstrained"]["chain_match"]["match@3"]
    assert metrics["constrained"]["validity"]["valid_fraction"] == 1.0
    rows = [
        json.loads(line) for line in gzip.open(tmp_path / "results_test_constrained.jsonl.gz", "rt").read().splitlines()
    ]
    assert len(rows) == 20 and all({"id", "triples", "scores", "chains", "paths", "beams"} <= set(r) for r in rows)
    assert all(b["valid"] for r in rows for b in r["beams"])
    for mode in ("unconstrained", "constrained"):  # a beam named like a ground chain reaches its ends too
        ends, names = metrics[mode]["end_match"], metrics[mode]["chain_match"]
        assert ends["questions"] == names["questions"] and all(
            ends[f"end_{k}"] >= names[k] for k in names if k.startswith("match@")
        )
    assert metrics["constrained"]["decode"]["shortest"] is True
    gsr = load_gsr(tmp_path / "model")
    assert len(gsr.relations) == metrics["num_relations"]
    assert gsr.open_vocabulary == (head == "open") and gsr.spec["relation_head"] == head
    residual = "yes" if head == "open" else ""
    assert (
        f"| gsr_tiny | {head} | {residual} | kg | {float(cfg.gsr.index_ratio):.4f} | 0 | 0.0000 | raw | joint | "
        "constrained | yes |"
    ) in metrics_table(collect_metrics(tmp_path))
    # every chain figure carries its 95% interval, which holds it: in metrics.json, gsr-table, match table
    for mode in ("unconstrained", "constrained"):
        bounds, flat = metrics[mode]["intervals"], collect_metrics(tmp_path)[0 if mode == "unconstrained" else 1]
        for name in ("match@1", "match@3", "cov_f1", "paper_f1", "paper_macro_f1", "seen_match@1"):
            assert bounds[name][0] <= flat[name] <= bounds[name][1], (mode, name)
    table_row = metrics_table(collect_metrics(tmp_path)).splitlines()[-1]
    match3 = collect_metrics(tmp_path)[-1]["match@3"]
    low, high = metrics["constrained"]["intervals"]["match@3"]
    assert f" {match3:.4f} ({low:.3f}-{high:.3f}) |" in table_row
    n = metrics["constrained"]["chain_match"]["questions"]
    assert f"| constrained | {n} | " in match_table(metrics, ["unconstrained", "constrained"]).splitlines()[-1]
    assert f" {match3:.4f} ({low:.3f}-{high:.3f}) |" in match_table(metrics, ["constrained"]).splitlines()[-1]
    if head == "token":  # eval-only reads no training split: "seen" comes from the saved model
        again = tmp_path / "again"
        run(compose_config([*overrides, f"paths.output_dir={again}", f"gsr.eval_only={tmp_path / 'model'}"]))
        redo = json.loads((again / "metrics.json").read_text())
        assert redo["data"]["train_questions"] == 0 and gsr.chain_relations
        assert str(metrics["checkpoint"]).endswith(".ckpt")  # the Lightning checkpoint carries them too
        assert load_gsr(in_run(tmp_path, metrics["checkpoint"])).chain_relations == gsr.chain_relations
        assert redo["constrained"]["match_by_group"] == metrics["constrained"]["match_by_group"]
        assert (
            sum(g["questions"] for g in redo["constrained"]["match_by_group"].values())
            == redo["constrained"]["chain_match"]["questions"]
        )
