"""Hydra finds sweepers only in the ``hydra_plugins`` namespace: gsr-train's Optuna sweeper
(`gsr_train.runtime.optuna_sweep`), named by ``conf/hydra/sweeper/gsr_optuna.yaml``.

Hydra imports every module of that namespace on every run, a refused option included, so this one
imports no Optuna (which brings torch: seconds) until the sweeper is made, as Hydra's own Optuna
sweeper does."""

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class GSROptunaSweeper(Sweeper):
    """`gsr_train.runtime.optuna_sweep.OptunaSweep`, where Hydra looks for plugins."""

    def __init__(self, objective: str, **options: Any) -> None:
        # lazy: Optuna imports torch (about 5 s) and this module is imported by every Hydra run
        from gsr_train.runtime.optuna_sweep import OptunaSweep

        self.sweeper = OptunaSweep(objective, **options)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.sweeper.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        return self.sweeper.sweep(arguments)
