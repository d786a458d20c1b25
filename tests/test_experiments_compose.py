"""Every experiment of the README's table (docs/reference/experiments.md) composes with no value left
to fill in (``???``): ``python train.py +experiment=NAME`` runs as written, with no extra option."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from .conftest import compose_config

EXPERIMENTS = sorted(
    p.stem
    for p in (Path(__file__).resolve().parents[1] / "conf" / "experiment").glob("*.yaml")
    if not p.stem.endswith("_defaults")
)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_without_missing_values(name):
    cfg = compose_config([f"+experiment={name}", "paths.output_dir=/tmp/x", f"experiment_name={name}"])
    assert OmegaConf.missing_keys(cfg) == set(), f"{name}: {sorted(OmegaConf.missing_keys(cfg))}"
    assert cfg.runner and cfg.data.name


def test_readers_without_a_retrieval_checkpoint_say_where_evidence_comes_from():
    from gsr_train.readers.evidence import evidence_source
    from gsr_train.runs.reader import reader_recipe
    from gsr_train.runtime.run_data import run_place

    cfg = compose_config(["+experiment=reader_webqsp_mini", "paths.output_dir=/tmp/x"])
    assert cfg.qa.retrieval.checkpoint is None
    assert evidence_source(reader_recipe(cfg).qa.retrieval, run_place(cfg), "test").startswith(
        "cosine retriever with minilm"
    )
    assert compose_config(["+experiment=reader_prompting", "paths.output_dir=/tmp/x"]).llm.autostart == "smollm2"
