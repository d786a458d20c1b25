"""Hydra finds sweepers only in the ``hydra_plugins`` namespace: gsr-train's Optuna sweeper
(:mod:`gsr_train.runtime.optuna_sweep`), named by ``conf/hydra/sweeper/gsr_optuna.yaml``."""

from gsr_train.runtime.optuna_sweep import OptunaSweep


class GSROptunaSweeper(OptunaSweep):
    """:class:`gsr_train.runtime.optuna_sweep.OptunaSweep`, where Hydra looks for plugins."""
