"""The GSR paper's 50-epoch recipe (``+experiment=gsr_paper_webqsp``): composes with the paper's
settings, every option valid, and refuses in one line where no CUDA device is visible."""

from __future__ import annotations

import pytest
import torch

from gsr_train.options.check import check_recipe

from .conftest import compose_config, quiet


def _paper(tmp_path, *extra):
    return compose_config(
        [
            "+experiment=gsr_paper_webqsp",
            f"paths.output_dir={tmp_path / 'run'}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            "experiment_name=gsr_paper_webqsp",
            *quiet(),
            *extra,
        ]
    )


def test_paper_recipe_has_the_papers_settings_and_valid_options(tmp_path):
    cfg = _paper(tmp_path)
    check_recipe(cfg)  # every option known and in range
    assert (cfg.trainer.accelerator, cfg.trainer.devices, cfg.trainer.precision) == ("gpu", 1, "bf16-mixed")
    assert (cfg.model.epochs, cfg.trainer.max_epochs, cfg.model.batch_size) == (50, 50, 128)
    assert (cfg.model.optim.lr, cfg.model.optim.weight_decay, cfg.model.optim.warmup_ratio) == (5e-4, 0.0, 0.0)
    assert (cfg.model.family, cfg.model.pretrained) == ("t5", "google-t5/t5-base")
    assert (cfg.data.name, cfg.gsr.variant, cfg.gsr.schedule, cfg.gsr.index_ratio) == (
        "webqsp_paths",
        "llm",
        "joint",
        1.0,
    )
    assert (cfg.gsr.decode.beams, cfg.top_k, cfg.gsr.monitor) == (10, 3, "val/match@1")
    assert cfg.gsr.require_gpu is True


def _error(cfg, capsys) -> str:
    from gsr_train.runs.experiment import report_user_errors, run_experiment

    with pytest.raises(SystemExit) as stop:
        report_user_errors(run_experiment, cfg)  # what train.py runs
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_paper_recipe_refuses_without_cuda_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    line = _error(_paper(tmp_path), capsys)
    assert "gsr.require_gpu" in line and "no CUDA device is visible" in line and "50 epochs of gsr_base" in line
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_the_cuda_gate_is_the_only_difference_on_a_gpu_machine(tmp_path, capsys, monkeypatch):
    # with CUDA visible the gate passes: offline, the next check (the T5-base weights) speaks instead
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty_hub"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    line = _error(_paper(tmp_path), capsys)
    assert "require_gpu" not in line and "google-t5/t5-base" in line
