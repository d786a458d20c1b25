"""A run SIGKILLed mid-epoch and restarted with ``resume=auto`` ends exactly like an uninterrupted one.

Real processes (``python train.py``): the uninterrupted run also logs to wandb (offline), so
the same test checks that hyperparameters and final metrics reach the tracker. Every model kind
of ``tests/scale_helpers.KINDS`` (SubgraphRAG, GSR, reader) is also crashed mid-epoch and resumed
from its ``last.ckpt`` in process: same batches per step, step count and final weights.
"""

from __future__ import annotations

import json
import signal
import subprocess

import pytest
import pytorch_lightning as pl
import torch

from gsr_train.eval.tail import in_run

from .conftest import REPO, offline_env, run_train
from .scale_helpers import KINDS, fit_on_cpu
from .subgraphrag_toy import toy_quickstart_args, write_toy

pytestmark = pytest.mark.integration

# 24 graphs / 4 per step = 6 steps per epoch, 3 epochs; last.ckpt every 2 steps; killed at step 9
# (epoch 1, batch 3): the resumed run restarts from step 8, in the middle of epoch 1.
STEPS_PER_EPOCH, EPOCHS, KILL_AT = 6, 3, 9


def _run(data, cache, out, *extra: str) -> subprocess.CompletedProcess:
    env = offline_env(quiet=True)
    args = [
        *toy_quickstart_args(data, epochs=EPOCHS),
        "model.dropout=0.1",
        "model.train.patience=null",
        "top_k=10",
        "subgraphrag.compare_cosine=false",
        "checkpoint_every_n_steps=2",
        "~callbacks.rich_progress",
        "trainer.enable_progress_bar=false",
        f"paths.cache_dir={cache}",
        f"hydra.run.dir={out}",
        "experiment_name=resume_test",
        *extra,
    ]
    return run_train(args, REPO, env)


def _weights(path):
    return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(tmp_path):
    data = write_toy(tmp_path / "data", sizes=(24, 8, 8))
    cache = tmp_path / "cache"
    full, crashed = tmp_path / "full", tmp_path / "crashed"

    proc = _run(data, cache, full, "logger=wandb")
    assert proc.returncode == 0, proc.stderr[-3000:]

    killed = _run(
        data,
        cache,
        crashed,
        "logger=csv",
        "+callbacks.kill._target_=tests.scale_helpers.KillAtStep",
        f"+callbacks.kill.step={KILL_AT}",
    )
    assert killed.returncode == -signal.SIGKILL
    last = crashed / "checkpoints" / "last.ckpt"
    assert last.exists() and not (crashed / "metrics.json").exists()
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["global_step"] == KILL_AT - 1 and state["epoch"] == 1  # mid-epoch checkpoint
    assert not list((crashed / "checkpoints").glob(".*tmp*"))  # no half-written checkpoint left behind

    resumed = _run(data, cache, crashed, "logger=csv", "resume=auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "skipping the first 2 batches of epoch 1" in resumed.stderr + resumed.stdout

    a = json.loads((full / "metrics.json").read_text())
    b = json.loads((crashed / "metrics.json").read_text())
    assert a["training"]["global_step"] == b["training"]["global_step"] == STEPS_PER_EPOCH * EPOCHS
    assert a["metrics"] == b["metrics"] and a["at_k"] == b["at_k"]
    assert a["training"]["best_score"] == b["training"]["best_score"]
    wa, wb = _weights(full / "checkpoints" / "last.ckpt"), _weights(crashed / "checkpoints" / "last.ckpt")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)

    # wandb (offline): one offline run folder whose record log holds the hyperparameters (the
    # composed config), the training curves and the final test metrics
    runs = list((full / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list((full / "wandb").iterdir())
    log = next(runs[0].glob("run-*.wandb")).read_bytes()
    for key in (
        b"model/hidden",
        b"top_k",
        b"epoch",
        b"val/sp_recall@",
        b"final/test/answer_recall@10",
        b"final/test/sp_recall@10",
    ):
        assert key in log, key


# ----------------------------------------------------------------------------- every model kind, in process
class _Crash(RuntimeError):
    pass


class _CrashAtStep(pl.Callback):
    """Raises when a training batch starts at global step ``step`` (after last.ckpt of step ``step``)."""

    def __init__(self, step: int) -> None:
        self.step = int(step)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            raise _Crash(f"crash at step {self.step}")


class _BatchLog(pl.Callback):
    """Which examples (batch fingerprint) each optimiser step trained on."""

    def __init__(self) -> None:
        self.steps: dict[int, str] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        import hashlib

        if isinstance(batch, dict):
            values = list(batch.values())
        else:
            values = list(vars(batch).values()) if hasattr(batch, "__dict__") else [batch]
        tensors = [t for t in values if isinstance(t, torch.Tensor)]
        assert tensors, type(batch)
        digest = hashlib.sha1()
        for t in tensors:
            digest.update(t.detach().cpu().contiguous().numpy().tobytes())
        self.steps[int(trainer.global_step)] = digest.hexdigest()


def _fit_kind(kind, ctx, root, batch, epochs, callbacks=(), ckpt_path=None):
    from pytorch_lightning.callbacks import ModelCheckpoint

    module = KINDS[kind]["module"](ctx)
    last = ModelCheckpoint(
        dirpath=root, every_n_train_steps=1, save_top_k=0, save_last=True, enable_version_counter=False
    )
    log = _BatchLog()
    options = {"devices": 1, "limit_val_batches": 0, **KINDS[kind].get("trainer", {})}
    trainer = fit_on_cpu(
        kind, ctx, module, root, batch, epochs, [last, log, *callbacks], fit={"ckpt_path": ckpt_path}, **options
    )
    return module, trainer, log.steps


@pytest.mark.parametrize("epoch", [0, 1])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_mid_epoch_resume_matches_uninterrupted_for_every_kind(kind, epoch, tmp_path):
    """Crash one batch into an epoch, resume from last.ckpt: same batches, steps and final weights.

    Epoch 0 matters too: there, unlike later epochs, a loader that reloads every epoch is
    not rebuilt after the restore, so the skip must not be fixed when the loader is made.
    """
    torch.set_num_threads(1)
    spec = KINDS[kind]
    ctx = spec["setup"](tmp_path)
    batch, epochs = 8, 2
    full, full_trainer, full_steps = _fit_kind(kind, ctx, tmp_path / "full", batch, epochs)
    per_epoch = full_trainer.global_step // epochs
    assert per_epoch >= 3 and full_trainer.global_step == per_epoch * epochs
    crash_at = epoch * per_epoch + 1  # one batch into the epoch

    with pytest.raises(_Crash):
        _fit_kind(kind, ctx, tmp_path / "crashed", batch, epochs, callbacks=[_CrashAtStep(crash_at)])
    last = tmp_path / "crashed" / "last.ckpt"
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["global_step"] == crash_at and state["epoch"] == epoch  # a mid-epoch checkpoint

    resumed, trainer, steps = _fit_kind(kind, ctx, tmp_path / "crashed", batch, epochs, ckpt_path=str(last))
    assert trainer.global_step == full_trainer.global_step
    assert sorted(steps) == list(range(crash_at, per_epoch * epochs))  # no batch trained twice or skipped
    assert all(steps[s] == full_steps[s] for s in steps)  # the same examples at every step
    wa, wb = spec["weights"](full), spec["weights"](resumed)
    assert wa.keys() == wb.keys() and wa
    for name in wa:
        assert torch.allclose(wa[name], wb[name], rtol=1e-5, atol=1e-7), name
    w0 = spec["weights"](spec["module"](ctx))
    assert any(not torch.equal(w0[n], wb[n]) for n in w0)


# ----------------------------------------------------------------------------- the reader runner, resume=auto
def test_reader_run_crashed_mid_epoch_resumes_with_resume_auto(tmp_path):
    """runs/reader.py: crash at step 4 (epoch 1) -> ``resume=auto`` -> same steps, adapter and predictions."""
    from gsr_train.runs.experiment import run_experiment as run  # seeds from cfg.seed like train.py

    from .scale_helpers import reader_adapter, reader_run_config, reader_run_inputs

    inputs = reader_run_inputs(tmp_path)

    def config(out, *extra):
        # 6 examples / batch 2 = 3 steps per epoch, 2 epochs; last.ckpt after every step
        return reader_run_config(inputs, out, "qa.train.epochs=2", "qa.train.batch_size=2", *extra)

    full, crashed = tmp_path / "full", tmp_path / "crashed"
    run(config(full))
    with pytest.raises(_Crash):
        run(config(crashed, "+callbacks.crash._target_=tests.test_resume._CrashAtStep", "+callbacks.crash.step=4"))
    state = torch.load(crashed / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert state["global_step"] == 4 and state["epoch"] == 1
    assert not (crashed / "metrics.json").exists() and not (crashed / "adapter").exists()
    run(config(crashed, "resume=auto"))

    a, b = (json.loads((d / "metrics.json").read_text()) for d in (full, crashed))
    assert a["train"]["steps"] == b["train"]["steps"] == 6
    assert a["train"]["resumed_from"] is None
    assert in_run(crashed, b["train"]["resumed_from"]) == crashed / "checkpoints" / "last.ckpt"
    wa, wb = reader_adapter(full), reader_adapter(crashed)
    assert wa.keys() == wb.keys() and wa
    assert all(torch.allclose(wa[n], wb[n], rtol=1e-5, atol=1e-7) for n in wa)
    assert any(float(v.abs().max()) > 0 for n, v in wb.items() if "lora_B" in n)  # it trained
    assert (full / "predictions_finetuned_retrieved.jsonl").read_text() == (
        crashed / "predictions_finetuned_retrieved.jsonl"
    ).read_text()
