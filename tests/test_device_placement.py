"""Placement follows the trainer: the device of every stage, the refusal of ``trainer=gpu`` where no
CUDA is visible, the float32 matmul precision, the hardware record of ``metrics.json`` and eval.py on
a machine without the GPU a run trained on (CUDA itself is the GPU lane's: tests/test_gpu.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from gsr_train.data.errors import PreflightError
from gsr_train.runtime.device import check_device, device_record, run_device, set_matmul_precision, wants_gpu

from .conftest import REPO, compose_config


def _cfg(**trainer):
    return OmegaConf.create({"trainer": trainer, "float32_matmul_precision": None})


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def four_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)


def test_the_trainer_picks_the_device_of_every_stage(four_gpus, monkeypatch):
    assert run_device(_cfg(accelerator="cpu")) == torch.device("cpu")  # trainer=cpu on a GPU machine: the CPU
    assert run_device(_cfg(accelerator="gpu", devices=1)) == torch.device("cuda", 0)
    assert run_device(_cfg(accelerator="auto")) == torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_RANK", "1")  # a DDP rank: its own GPU, picked from the trainer's list
    assert run_device(_cfg(accelerator="gpu", devices=2)) == torch.device("cuda", 1)
    assert run_device(_cfg(accelerator="gpu", devices=[2, 3])) == torch.device("cuda", 3)


def test_the_text_encoder_follows_the_trainer_unless_told(four_gpus):
    from pathlib import Path

    from gsr_train.runtime.device import place_encoder
    from gsr_train.runtime.run_data import RunPlace, encoder_options

    def encoder_key(cfg):  # what keys the caches: the run's encoder options without its device
        return RunPlace(Path(), Path(), None, encoder_options(cfg)).encoder_key

    for trainer, device in (("cpu", "cpu"), ("gpu", "cuda:0")):
        cfg = compose_config(["+experiment=subgraphrag_quickstart", f"trainer={trainer}"])
        assert cfg.encoder.device is None  # the preset says: the trainer's
        key = encoder_key(cfg)
        place_encoder(cfg)
        assert cfg.encoder.device == device and encoder_key(cfg) == key  # cache keys do not move with it
    told = compose_config(["+experiment=subgraphrag_quickstart", "trainer=gpu", "encoder.device=cpu"])
    place_encoder(told)
    assert told.encoder.device == "cpu"


def test_more_gpus_than_visible_is_one_line(four_gpus):
    check_device(_cfg(accelerator="gpu", devices=4))
    with pytest.raises(PreflightError, match=r"trainer.devices=8: 4 CUDA devices visible here; use trainer.devices=4"):
        check_device(_cfg(accelerator="gpu", devices=8))
    with pytest.raises(PreflightError, match=r"trainer.devices=\[2, 4\]: 4 CUDA devices visible"):
        check_device(OmegaConf.create({"trainer": {"accelerator": "gpu", "devices": [2, 4]}}))


def test_without_cuda_everything_stays_on_the_cpu(no_cuda):
    assert not wants_gpu(_cfg(accelerator="auto"))
    assert run_device(_cfg(accelerator="auto")) == torch.device("cpu")
    with pytest.raises(PreflightError, match=r"trainer.accelerator=gpu: no CUDA device is visible .* use trainer=cpu"):
        check_device(_cfg(accelerator="gpu"), typed=["trainer=gpu"])  # asked for: refused
    check_device(_cfg(accelerator="cpu"), typed=[])


def test_a_preset_gpu_runs_on_the_cpu_where_there_is_none(no_cuda, caplog):
    cfg = compose_config(["+experiment=gsr_base", "experiment_name=gsr_base"])
    assert cfg.trainer.accelerator == "gpu"  # the paper recipe asks for one
    check_device(cfg, typed=["+experiment=gsr_base"])
    assert cfg.trainer.accelerator == "cpu" and cfg.trainer.devices == 1 and run_device(cfg).type == "cpu"
    assert "gsr_base asks for a GPU (trainer=gpu) and no CUDA device is visible here" in caplog.text
    several = compose_config(["+experiment=gsr_base", "trainer.devices=4"])
    with pytest.raises(PreflightError):
        check_device(several, typed=["+experiment=gsr_base", "trainer.accelerator=gpu"])


def test_matmul_precision_defaults_by_device_and_is_recorded(four_gpus):
    before = torch.get_float32_matmul_precision()
    try:
        assert set_matmul_precision(_cfg(accelerator="cpu")) == "highest"
        assert set_matmul_precision(_cfg(accelerator="gpu")) == "high"
        explicit = OmegaConf.create({"trainer": {"accelerator": "gpu"}, "float32_matmul_precision": "medium"})
        assert set_matmul_precision(explicit) == "medium" == torch.get_float32_matmul_precision()
        record = device_record(_cfg(accelerator="cpu"))
        assert record["device"] == "cpu" and record["float32_matmul_precision"] == "medium"
        assert record["torch"] == torch.__version__ and record["cpus"] >= 1
    finally:
        torch.set_float32_matmul_precision(before)


def _train(tmp_path, *args):
    env = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "GSR_TRAIN_CACHE": str(tmp_path / "cache"), "PATH": ""}
    code = (
        "import sys, torch; torch.cuda.is_available = lambda: False; "  # a machine without CUDA, wherever this runs
        f"sys.argv = ['train.py', *{list(args)!r}]; sys.path.insert(0, {str(REPO)!r}); "
        f"import runpy; runpy.run_path({str(REPO / 'train.py')!r}, run_name='__main__')"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)


@pytest.mark.integration
def test_trainer_gpu_without_cuda_is_one_line_before_any_work(tmp_path):
    proc = _train(tmp_path, "+experiment=subgraphrag_quickstart", "trainer=gpu")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "no CUDA device is visible" in lines[0] and "use trainer=cpu" in lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "cache").exists()  # no data generated, embedded or indexed


@pytest.mark.integration
def test_a_bad_matmul_precision_is_one_line(tmp_path):
    proc = _train(tmp_path, "+experiment=cosine_baseline", "float32_matmul_precision=fast")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "float32_matmul_precision=fast" in proc.stderr and "one of highest, high, medium or null" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_eval_of_a_gpu_run_on_a_machine_without_one_scores_on_the_cpu(no_cuda, tmp_path):
    from gsr_train.options.eval_config import RunSource, eval_config

    trained = compose_config(["+experiment=subgraphrag_quickstart", "trainer=gpu"])
    composed = compose_config(["ckpt_path=x", f"paths.output_dir={tmp_path}"], config_name="eval")
    source = RunSource(tmp_path, trained, "subgraphrag_quickstart", "subgraphrag", str(tmp_path / "best.ckpt"))
    cfg = eval_config(source, composed, [])
    check_device(cfg, typed=["ckpt_path=x"])  # the run's own trainer=gpu, not typed now
    assert cfg.trainer.accelerator == "cpu" and run_device(cfg) == torch.device("cpu")
    asked = compose_config(["ckpt_path=x", "trainer=gpu", f"paths.output_dir={tmp_path}"], config_name="eval")
    with pytest.raises(PreflightError):  # asked for on the command line, the GPU is not silently dropped
        check_device(eval_config(source, asked, ["trainer=gpu"]), typed=["ckpt_path=x", "trainer=gpu"])


# ----------------------------------------------------------------------------- several GPUs, composed
@pytest.mark.parametrize("trainer", [["trainer=gpu", "trainer.devices=4"], ["trainer=ddp", "trainer.devices=4"]])
def test_several_gpus_compose_into_one_global_batch(trainer, four_gpus):
    from gsr_train.runtime.training import planned_world_size, rank_batch

    cfg = compose_config(["+experiment=subgraphrag_quickstart", *trainer])
    assert cfg.trainer.accelerator == "gpu" and cfg.trainer.devices == 4
    assert cfg.trainer.strategy in ("auto", "ddp")  # auto: Lightning's DDP for more than one device
    assert planned_world_size(cfg) == 4
    assert rank_batch(cfg, 16, "model.train.graphs_per_batch") == 4  # the global batch, split
    with pytest.raises(PreflightError, match="does not split over 4 processes"):
        rank_batch(cfg, 10, "model.train.graphs_per_batch")
    nodes = compose_config(["+experiment=subgraphrag_quickstart", *trainer, "trainer.num_nodes=2"])
    assert planned_world_size(nodes) == 8


def test_the_slurm_launcher_asks_for_one_task_per_gpu_on_every_node(tmp_path):
    cfg = compose_config(
        [
            "+experiment=gsr_base",
            "hydra/launcher=slurm",
            "trainer=gpu",
            "trainer.devices=4",
            "trainer.num_nodes=2",
            "experiment_name=x",
            f"hydra.sweep.dir={tmp_path}",
        ],
        return_hydra_config=True,
    )
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["nodes"] == 2 and launcher["gpus_per_node"] == 4 and launcher["tasks_per_node"] == 4


@pytest.mark.integration
def test_ddp_relaunches_train_py_into_the_one_run_folder(tmp_path):
    """``trainer.devices=N`` with the ddp strategy relaunches ``train.py`` per rank (what N GPUs do):
    on the CPU with gloo, the ranks share rank 0's folder, which ends finished with one metrics.json."""
    from .test_experiments_e2e import QUIET, SYNTHETIC

    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
        "GSR_TRAIN_CACHE": str(tmp_path / "cache"),
    }
    args = ["+experiment=subgraphrag_quickstart", "trainer=cpu", "trainer.devices=2", "+trainer.strategy=ddp"]
    args += ["model.train.epochs=1", "subgraphrag.compare_cosine=false", *SYNTHETIC, *QUIET]
    proc = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = (tmp_path / "outputs" / "subgraphrag_quickstart").iterdir()  # one folder for both ranks
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    doc = json.loads((run / "metrics.json").read_text())
    assert doc["training"]["devices"] == 2 and doc["rows"][0]["metrics"]["sp_recall"] > 0
    assert (run / "train_ddp_process_1.log").exists()
