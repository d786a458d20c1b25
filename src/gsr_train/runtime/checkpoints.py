"""``checkpoints/last.ckpt``: always the newest state a run can be resumed from exactly.

Lightning's ``ModelCheckpoint(save_last=True)`` rewrites ``last.ckpt`` only when it also saved
a top-k checkpoint (a monitored metric that improved) or on its own schedule, and a checkpoint
written at the end of validation holds an epoch whose epoch-end hooks have not run: resumed,
Lightning skips them and early stopping finds no metric. `LastCheckpoint` writes
``last.ckpt`` only at states Lightning resumes exactly:

- every ``every_n_train_steps`` optimiser steps, at a step boundary inside an epoch (the last
  step of an epoch is left to the epoch-end write that follows it);
- at every epoch end, after validation, early stopping and the best checkpoint have taken the
  epoch in (checkpoint callbacks run last);
- when training ends. A run stopped by early stopping is marked so: resumed, it does not train
  again (Lightning would start a new epoch) but goes on to its evaluation with the same best
  checkpoint. A run that reached its epoch budget is left to Lightning: resumed with the same
  budget it does not train again, with a larger one (``model.train.epochs``) it trains on.

It also honours stop signals (`gsr_train.runtime.interrupts`): a signal received during
training stops it at the next of those states, after writing ``last.ckpt`` there.
`gsr_train.runtime.training.make_trainer` adds one to every Trainer (``callbacks.step_checkpoint``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from gsr_train.runtime.interrupts import INTERRUPTS, RunInterrupted

log = logging.getLogger(__name__)


class LastCheckpoint(ModelCheckpoint):
    """Writes only ``last.ckpt`` (see the module docstring) and stops training on a stop signal."""

    def __init__(self, dirpath: str, every_n_train_steps: int | None = None, **kwargs: Any) -> None:
        kwargs.pop("save_top_k", None)
        kwargs.pop("save_last", None)
        super().__init__(
            dirpath=dirpath,
            every_n_train_steps=every_n_train_steps or None,
            save_top_k=0,
            save_last=True,
            enable_version_counter=False,
            **kwargs,
        )
        self.stopped_early = False
        self._restored_stopped = False
        self._saved_at: tuple | None = None
        self._owns_interrupts = False

    # ------------------------------------------------------------------ state in the checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "stopped_early": self.stopped_early}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._restored_stopped = bool(state_dict.get("stopped_early", False))

    @property
    def path(self) -> Path:
        return Path(str(self.dirpath)) / f"{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}"

    def _write(self, trainer, where: str) -> None:
        if trainer.sanity_checking or trainer.fast_dev_run:
            return
        key = (trainer.global_step, trainer.current_epoch, where == "end")
        if key == self._saved_at:
            return
        self._save_checkpoint(trainer, str(self.path))
        self._saved_at = key

    # ------------------------------------------------------------------ when it writes
    def on_fit_start(self, trainer, pl_module) -> None:
        super().on_fit_start(trainer, pl_module)
        self._owns_interrupts = INTERRUPTS.install()
        INTERRUPTS.reclaim()  # Lightning's fit set its own SIGTERM handler just before this hook
        INTERRUPTS.deferring = True

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        self._saved_at = (trainer.global_step, trainer.current_epoch, True)
        if self._restored_stopped:  # early stopping had ended training before the interruption
            log.info("resumed from a checkpoint written after early stopping: not training again")
            self.stopped_early = True
            trainer.should_stop = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loop = trainer.fit_loop.epoch_loop
        if loop._should_accumulate():
            return  # between optimiser steps: no resumable state
        last_of_epoch = loop.batch_progress.is_last_batch
        every = self._every_n_train_steps
        if every and trainer.global_step % every == 0 and not last_of_epoch:
            self._write(trainer, "step")
        if not last_of_epoch:
            self._stop_on_signal(trainer, "step")

    def on_validation_end(self, trainer, pl_module) -> None:
        """Nothing: a state mid-way through an epoch's end is not one to resume from."""

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.should_stop and trainer.fit_loop._can_stop_early:
            self.stopped_early = True  # a resumed run must not train again
        self._write(trainer, "epoch")
        self._stop_on_signal(trainer, "epoch")

    def on_train_end(self, trainer, pl_module) -> None:
        self._write(trainer, "end")

    def teardown(self, trainer, pl_module, stage: str) -> None:
        super().teardown(trainer, pl_module, stage)
        INTERRUPTS.deferring = False
        if self._owns_interrupts:
            INTERRUPTS.uninstall()
            self._owns_interrupts = False

    # ------------------------------------------------------------------ stop signals
    @staticmethod
    def _pending_signal(trainer) -> int:
        """The stop signal any rank received (all ranks must stop at the same step: saving is collective)."""
        signum = INTERRUPTS.signum or 0
        if trainer.world_size > 1:
            signum = int(
                trainer.strategy.reduce(
                    torch.tensor([signum], device=trainer.strategy.root_device), reduce_op="max"
                ).item()
            )
        return signum

    def _stop_on_signal(self, trainer, where: str) -> None:
        signum = self._pending_signal(trainer)
        if not signum:
            return
        self._write(trainer, where)
        log.warning(
            "stopped at step %d (epoch %d) with checkpoints/last.ckpt written; continue with resume=auto",
            trainer.global_step,
            trainer.current_epoch,
        )
        raise RunInterrupted(signum, str(self.path))
