"""Where a run computes: the trainer's accelerator decides for every stage of the run, not only
``trainer.fit`` (serving a trained scorer, GSR decoding, a reader's generation and its 4-bit
weights, the retrieval metrics), so ``trainer=cpu`` on a GPU machine stays on the CPU and
``trainer=gpu`` puts every stage on the GPU. The float32 matmul precision is set once per run
(``float32_matmul_precision``: null = ``high`` on CUDA, ``highest`` on the CPU) and recorded with
the device in ``metrics.json``."""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Sequence
from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from gsr_train.data.errors import PreflightError
from gsr_train.numerics import mode_error, numerics_record

log = logging.getLogger(__name__)

GPU_ACCELERATORS = ("gpu", "cuda")


def _trainer(cfg: DictConfig) -> Any:
    return OmegaConf.select(cfg, "trainer", default=None) or {}


def wants_gpu(cfg: DictConfig) -> bool:
    """The trainer asks for CUDA (``trainer=gpu``), or takes whatever is there (``auto``) and CUDA is."""
    accelerator = str(_trainer(cfg).get("accelerator", "auto")).lower()
    return accelerator in GPU_ACCELERATORS or (accelerator == "auto" and torch.cuda.is_available())


def typed_overrides() -> list[str]:
    """The overrides typed on this run's command line (none outside a Hydra run)."""
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:  # outside a Hydra run
        return []


def _typed_gpu(typed: Sequence[str]) -> bool:
    return any(o.lstrip("+~").split("=", 1)[0] in ("trainer", "trainer.accelerator") for o in typed)


def check_device(cfg: DictConfig, typed: Sequence[str] | None = None) -> None:
    """Where no CUDA device is visible, ``trainer=gpu`` typed on the command line is one line before any
    work (Lightning would say it only once the data is prepared); an experiment whose preset asks for a
    GPU (``gsr_base``, the paper recipes) runs on the CPU instead, with a warning. More ``trainer.devices``
    than are visible is one line too, and so is a ``GSR_TRAIN_NUMERICS`` that names no mode."""
    numerics = mode_error()
    if numerics is not None:
        raise PreflightError(numerics)
    accelerator = str(_trainer(cfg).get("accelerator", "auto")).lower()
    if accelerator not in GPU_ACCELERATORS:
        return
    if not torch.cuda.is_available():
        typed = typed_overrides() if typed is None else typed
        if _typed_gpu(typed):
            raise PreflightError(
                f"trainer.accelerator={accelerator}: no CUDA device is visible here (torch "
                f"{torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); use trainer=cpu"
            )
        name = OmegaConf.select(cfg, "experiment_name", default=None) or "this experiment"
        log.warning(
            "%s asks for a GPU (trainer=gpu) and no CUDA device is visible here: it runs on the CPU, "
            "slower (trainer=cpu says so and silences this)",
            name,
        )
        with open_dict(cfg.trainer):
            cfg.trainer.accelerator, cfg.trainer.devices = "cpu", 1
            if "strategy" in cfg.trainer:
                cfg.trainer.strategy = "auto"
        return
    devices, visible = _trainer(cfg).get("devices", 1), torch.cuda.device_count()
    listed = OmegaConf.is_list(devices) or isinstance(devices, (list, tuple))
    wanted = max((int(d) + 1 for d in devices), default=0) if listed else devices
    if str(wanted).lstrip("-").isdigit() and int(wanted) > visible:
        noun = "device" if visible == 1 else "devices"
        raise PreflightError(
            f"trainer.devices={devices}: {visible} CUDA {noun} visible here; use trainer.devices={visible} "
            "or fewer (several nodes: trainer.num_nodes, each with its own GPUs)"
        )


def _device_index(cfg: DictConfig) -> int:
    """This process's GPU: the trainer's ``devices`` list picked by the local rank (DDP), else the rank."""
    local = int(os.environ.get("LOCAL_RANK", 0) or 0)
    devices = _trainer(cfg).get("devices", "auto")
    if OmegaConf.is_list(devices) or isinstance(devices, (list, tuple)):
        ids = [int(d) for d in devices]
        return ids[local % len(ids)] if ids else local
    return local


def run_device(cfg: DictConfig) -> torch.device:
    """The device every stage of the run computes on (see the module docstring)."""
    if wants_gpu(cfg) and torch.cuda.is_available():
        return torch.device("cuda", _device_index(cfg) % max(torch.cuda.device_count(), 1))
    return torch.device("cpu")


def set_matmul_precision(cfg: DictConfig) -> str:
    """Apply ``float32_matmul_precision`` (null: ``high`` on CUDA, TF32 matmuls, as Lightning advises
    on every GPU run; ``highest`` on the CPU); the value in force."""
    wanted = OmegaConf.select(cfg, "float32_matmul_precision", default=None)
    value = str(wanted) if wanted is not None else ("high" if run_device(cfg).type == "cuda" else "highest")
    torch.set_float32_matmul_precision(value)
    return value


def device_record(cfg: DictConfig) -> dict[str, Any]:
    """What ``metrics.json`` says of the hardware the figures come from."""
    device = run_device(cfg)
    record: dict[str, Any] = {
        "device": str(device),
        "accelerator": str(_trainer(cfg).get("accelerator", "auto")),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "torch": torch.__version__,
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }
    if device.type == "cuda":
        record["name"] = torch.cuda.get_device_name(device)
        record["cuda"] = torch.version.cuda
    else:
        record["name"] = platform.processor() or platform.machine()
        record["numerics"] = numerics_record()  # the CPU's kernels and MKL's mode (gsr_train.numerics)
    return record


def place_encoder(cfg: DictConfig) -> None:
    """``encoder.device: null`` (the presets) becomes the run's device, so the text encoder follows the
    trainer like every other stage; a device the user gave stays."""
    encoder = OmegaConf.select(cfg, "encoder", default=None)
    if isinstance(encoder, DictConfig) and "device" in encoder and encoder.device is None:
        with open_dict(encoder):
            encoder.device = str(run_device(cfg))
