"""A GSR run's learning curve: the runner writes val_curve.json (one row per validation, with
intervals), early stopping ends the run, and bench/gsr_learning_curve.py draws and tabulates it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import compose_config, quiet

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["num_people=120", "num_films=30", "num_cities=24", "num_regions=12", "num_countries=6"]
SMALL += ["num_organisations=12", "num_universities=6", "num_train=60", "num_validation=20", "num_test=20"]


@pytest.mark.slow
def test_early_stopping_ends_the_run_and_the_curve_is_written(tmp_path):
    from gsr_train.runs.gsr import run

    cfg = compose_config(
        [
            "+experiment=gsr_quickstart",
            f"paths.output_dir={tmp_path}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            "experiment_name=test",
            "model.epochs=4",
            # a monitor that never improves after its first value: stopped after patience + 1 validations
            "gsr.monitor=val/questions",
            "gsr.patience=1",
            *quiet(),
            "gsr.decode.beams=2",
            "gsr.eval_modes=[unconstrained]",
            *[f"+data.synthetic.{s}" for s in SMALL],
        ]
    )
    run(cfg)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["fit"]["stopped_early"] is True and metrics["fit"]["epochs_run"] == 2
    curve = json.loads((tmp_path / "val_curve.json").read_text())
    assert curve["monitor"] == "val/questions" and [r["epoch"] for r in curve["epochs"]] == [0, 1]
    for row in curve["epochs"]:
        for name in ("match@1", "match@3"):
            assert row[f"{name}_low"] <= row[name] <= row[f"{name}_high"]
    assert "best-epoch00" in metrics["checkpoint"]  # the first epoch stays the best one


def test_learning_curve_script_draws_and_tabulates_a_curve(tmp_path):
    rows = [
        {"epoch": e, "step": 10 * e, "match@1": m1, "match@1_low": m1 - 0.05, "match@1_high": m1 + 0.05}
        | {"match@3": m3, "match@3_low": m3 - 0.04, "match@3_high": m3 + 0.04}
        for e, (m1, m3) in enumerate([(0.35, 0.57), (0.52, 0.76), (0.61, 0.81), (0.60, 0.83)])
    ]
    (tmp_path / "val_curve.json").write_text(json.dumps({"monitor": "val/match@1", "epochs": rows}))
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "gsr_learning_curve.py"),
            str(tmp_path),
            "--table",
            str(tmp_path / "t.md"),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    png = (tmp_path / "learning_curve.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    table = (tmp_path / "t.md").read_text().splitlines()
    assert table[0] == "| epoch | val match@1 | val match@3 |" and len(table) == 2 + 4
    assert table[4] == "| 3 (best) | 0.610 (0.56-0.66) | 0.810 (0.77-0.85) |" and table[4] in out
    missing = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gsr_learning_curve.py"), str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode != 0 and "no val_curve.json" in missing.stderr
