"""``checkpoints/last.ckpt`` that is always the newest state of a run.

Lightning's ``ModelCheckpoint(save_last=True)`` rewrites ``last.ckpt`` only when it also
saved a top-k checkpoint at that step (a monitored metric that improved) or on its own
step schedule, so after an epoch that does not improve, ``last.ckpt`` is an older state and
``resume=auto`` would go back in time. :class:`LastCheckpoint` writes it every
``every_n_train_steps`` optimiser steps, at every epoch end and when training ends,
whenever the state moved since its last write. :func:`gsr_train.runs.common.make_trainer`
adds one to every Trainer (configured by ``callbacks.step_checkpoint``).
"""
from __future__ import annotations

from typing import Any

from pytorch_lightning.callbacks import ModelCheckpoint


class LastCheckpoint(ModelCheckpoint):
    """Writes only ``last.ckpt``: every N optimiser steps, every epoch end, at the end of training."""

    def __init__(self, dirpath: str, every_n_train_steps: int | None = None, **kwargs: Any) -> None:
        kwargs.pop("save_top_k", None)
        kwargs.pop("save_last", None)
        super().__init__(dirpath=dirpath, every_n_train_steps=every_n_train_steps or None, save_top_k=0,
                         save_last=True, enable_version_counter=False, **kwargs)

    def _write_last(self, trainer) -> None:
        if not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_validation_end(self, trainer, pl_module) -> None:
        super().on_validation_end(trainer, pl_module)
        if not trainer.sanity_checking:
            self._write_last(trainer)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if not trainer.enable_validation or not _validates_this_epoch(trainer):
            self._write_last(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self._write_last(trainer)


def _validates_this_epoch(trainer) -> bool:
    """Whether a validation loop follows this epoch's training (then ``on_validation_end`` writes)."""
    batches = trainer.num_val_batches
    total = sum(batches) if isinstance(batches, list) else batches
    every = trainer.check_val_every_n_epoch
    return bool(total) and (every is None or (trainer.current_epoch + 1) % every == 0)
