"""GSR configs compose, and hub-only model sizes fail fast offline with instructions."""

from __future__ import annotations

import pytest

from gsr_train.models.gsr.modeling import ModelUnavailable, build_gsr_model, resolve_pretrained

from .conftest import compose_config


def _compose(overrides):
    return compose_config(overrides)


@pytest.mark.parametrize(
    "experiment,model,data",
    [
        ("gsr_quickstart", "gsr_tiny", "synthetic"),
        ("gsr_webqsp_paths", "gsr_minilm", "webqsp_paths"),
        ("gsr_base", "gsr_base", "webqsp"),
    ],
)
def test_experiments_compose(experiment, model, data):
    cfg = _compose([f"+experiment={experiment}", "paths.output_dir=/tmp/x"])
    assert cfg.runner == "gsr"
    assert cfg.model.name == model and cfg.data.name == data
    assert cfg.trainer.max_epochs == cfg.model.epochs
    assert cfg.gsr.decode.beams == 10 and cfg.top_k == 3


@pytest.mark.parametrize("size,batch,lr", [("base", 128, 5e-4), ("large", 128, 2e-4), ("3b", 64, 1e-4)])
def test_paper_hyperparameters(size, batch, lr):
    cfg = _compose(["+experiment=gsr_paper_webqsp", f"model=gsr_{size}", "paths.output_dir=/tmp/x"])
    assert (cfg.model.epochs, cfg.model.batch_size, cfg.model.optim.lr) == (50, batch, lr)


def test_hub_sizes_fail_fast_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache: nothing is available
    with pytest.raises(ModelUnavailable, match="model.pretrained=/path/to"):
        resolve_pretrained("google-t5/t5-base")
    with pytest.raises(ModelUnavailable, match="HF_HUB_OFFLINE"):
        build_gsr_model({"family": "t5", "pretrained": "google-t5/t5-small"}, ["a.b.c"])
    with pytest.raises(ModelUnavailable, match="not a folder"):
        resolve_pretrained("/does/not/exist")
