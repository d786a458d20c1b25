"""Which function runs each experiment: ``runner: NAME`` in an experiment file picks one here.

The table is code, so the route from ``python train.py +experiment=X`` to the function that
does the work is one lookup a reader can follow (and a type checker can check). A name not in
the table is the ``run`` function of ``gsr_train.runs.NAME``: a new built-in experiment kind is
its runner module, its options (`gsr_train.options.recipes.RECIPES`) and its experiment
file, with no edit here. Run folders written before the names existed saved a dotted path
(``gsr_train.runs.gsr.run``); those still resolve. A runner of the user's own, outside
gsr-train, is named by its dotted path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from gsr_train.options.runners import UnknownRunner, find_runner
from gsr_train.plugins import Registry
from gsr_train.runs import classic, cosine, gsr, open_ended, patterns, reader, retrieve, robustness, subgraphrag

Runner = Callable[[DictConfig], Any]
__all__ = ["RUNNERS", "Runner", "UnknownRunner", "runner_of"]

RUNNERS: Registry[Runner] = Registry("runner", error=UnknownRunner, target_option="runner")
RUNNERS.update(
    subgraphrag=subgraphrag.run,
    gsr=gsr.run,
    reader=reader.run,
    retrieve=retrieve.run,
    cosine=cosine.run,
    classic=classic.run,
    simgrag=patterns.run_simgrag,
    safe=patterns.run_safe,
    robustness=robustness.run,
    open_ended=open_ended.run_open_ended,
    judge_calibration=open_ended.run_calibration,
    open_ended_perturbed=open_ended.run_perturbed,
)


def runner_of(cfg: DictConfig) -> Runner:
    """The function that runs ``cfg``'s experiment (`gsr_train.options.runners.find_runner`)."""
    runner: Runner = find_runner(cfg.get("runner"), RUNNERS)
    return runner
