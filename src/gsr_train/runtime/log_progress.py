"""Training progress in a log file: a Lightning callback that logs optimiser steps done / total,
rate, elapsed time and ETA every ``every_seconds`` (a live progress bar writes nothing useful
into a cluster job's log). :func:`gsr_train.runtime.training.make_trainer` adds it when stderr is
not a terminal."""

from __future__ import annotations

import math

from pytorch_lightning.callbacks import Callback

from gsr_train.progress import LOG_EVERY_SECONDS, LogProgress


class TrainingLogProgress(Callback):
    """``train (epoch 2/10): 340/1200 (28.3%), 12/s, elapsed 0:00:28, ETA 0:01:10`` lines."""

    def __init__(self, every_seconds: float = LOG_EVERY_SECONDS) -> None:
        self.every = float(every_seconds)
        self.advance: LogProgress | None = None
        self.seen = 0

    def on_train_start(self, trainer, pl_module) -> None:
        total = trainer.estimated_stepping_batches
        total = int(total) if total is not None and math.isfinite(float(total)) else 0
        self.seen = int(trainer.global_step)
        self.advance = LogProgress(max(total, self.seen), "train", self.seen, self.every)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.advance is None or trainer.global_step <= self.seen:
            return
        self.advance.description = f"train (epoch {trainer.current_epoch + 1}/{trainer.max_epochs})"
        step, self.seen = int(trainer.global_step), int(trainer.global_step)
        self.advance(step - self.advance.done)
