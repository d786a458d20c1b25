"""Training progress in a log file: a Lightning callback that logs optimiser steps done / total,
rate, elapsed time and ETA every ``every_seconds`` (a live progress bar writes nothing useful
into a cluster job's log). `gsr_train.runtime.training.make_trainer` adds it when stderr is
not a terminal. `EpochBar` is the live bar, counting epochs as the log lines do (from 1)."""

from __future__ import annotations

import math

from pytorch_lightning.callbacks import Callback, RichProgressBar

from gsr_train.progress import LOG_EVERY_SECONDS, LogProgress


def epoch_text(epoch: int, max_epochs: int | None) -> str:
    """``epoch 3/10``: the 0-based ``epoch`` counted from 1, as in the log and the bar."""
    return f"epoch {epoch + 1}" + (f"/{max_epochs}" if max_epochs is not None and max_epochs > 0 else "")


class EpochBar(RichProgressBar):
    """Lightning's rich bar, its epochs counted from 1 like the log lines (``Epoch 12/12`` for the
    last of 12, where Lightning's own says ``Epoch 11/11``)."""

    def _get_train_description(self, current_epoch: int) -> str:
        text = "E" + epoch_text(current_epoch, self.trainer.max_epochs)[1:]
        return f"{text:{len(self.validation_description)}}"  # Lightning's padding: no flicker


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
        self.advance.description = f"train ({epoch_text(trainer.current_epoch, trainer.max_epochs)})"
        step, self.seen = int(trainer.global_step), int(trainer.global_step)
        self.advance(step - self.advance.done)
