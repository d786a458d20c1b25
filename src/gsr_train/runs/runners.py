"""Which function runs each experiment: ``runner: NAME`` in an experiment file picks one here.

The table is code, so the route from ``python train.py +experiment=X`` to the function that
does the work is one lookup a reader can follow (and a type checker can check). A name not in
the table is the ``run`` function of ``gsr_train.runs.NAME``: a new built-in experiment kind is
its runner module, its options (:data:`gsr_train.options.recipes.RECIPES`) and its experiment
file, with no edit here. Run folders written before the names existed saved a dotted path
(``gsr_train.runs.gsr.run``); those still resolve. A runner of the user's own, outside
gsr-train, is named by its dotted path.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import hydra.utils
from omegaconf import DictConfig

from gsr_train.data.errors import UserError
from gsr_train.options.recipes import runner_name
from gsr_train.runs import classic, cosine, gsr, open_ended, patterns, reader, retrieve, robustness, subgraphrag

Runner = Callable[[DictConfig], Any]

RUNNERS: dict[str, Runner] = {
    "subgraphrag": subgraphrag.run,
    "gsr": gsr.run,
    "reader": reader.run,
    "retrieve": retrieve.run,
    "cosine": cosine.run,
    "classic": classic.run,
    "simgrag": patterns.run_simgrag,
    "safe": patterns.run_safe,
    "robustness": robustness.run,
    "open_ended": open_ended.run_open_ended,
    "judge_calibration": open_ended.run_calibration,
    "open_ended_perturbed": open_ended.run_perturbed,
}


class UnknownRunner(UserError, ValueError):
    """An experiment's ``runner`` that is neither a built-in name nor an importable function."""


def runner_of(cfg: DictConfig) -> Runner:
    """The function that runs ``cfg``'s experiment."""
    name = runner_name(cfg.get("runner"))
    if name in RUNNERS:
        return RUNNERS[name]
    if name.isidentifier():  # runner: NAME -> gsr_train.runs.NAME.run
        try:
            module = importlib.import_module(f"gsr_train.runs.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"gsr_train.runs.{name}":
                raise
        else:
            if callable(getattr(module, "run", None)):
                return module.run
    if "." in name:  # a runner of the user's own
        try:
            return hydra.utils.get_method(name)
        except Exception as e:  # noqa: BLE001 - any import failure is the user's path to fix
            raise UnknownRunner(f"runner={name}: cannot import it ({type(e).__name__}: {e})") from None
    raise UnknownRunner(
        f"runner={name}: not a runner; built in: {', '.join(RUNNERS)} (or a dotted path to a function of your own)"
    )
