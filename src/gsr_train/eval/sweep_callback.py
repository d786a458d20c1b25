"""The Hydra callback that writes a sweep's table (`gsr_train.eval.aggregate.aggregate`) when a
multirun ends (``hydra.callbacks.aggregate`` in conf/config.yaml). Hydra makes every callback of
conf/config.yaml on every run, a refused option included, so this module imports nothing heavy."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

log = logging.getLogger(__name__)


class AggregateCallback(Callback):
    """Hydra callback: after a multirun, write the aggregated table into the sweep folder."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = bool(enabled)

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        if not self.enabled:
            return
        sweep = Path(str(config.hydra.sweep.dir))
        if not sweep.exists():
            log.warning("multirun ended but %s does not exist (launcher wrote elsewhere?)", sweep)
            return
        # lazy: the table's intervals import torch (seconds), and Hydra makes this callback on every
        # run before the option check refuses a mistake in well under a second
        from gsr_train.eval.aggregate import aggregate

        rows = aggregate(sweep)
        log.info("aggregated %d rows into %s/aggregate.{csv,md}", len(rows), sweep)
