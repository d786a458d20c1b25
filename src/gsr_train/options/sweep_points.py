"""Every point of a grid sweep (``python train.py -m a=1,2 b=x,y``) checked before the first one runs,
and the edges of an Optuna search space before its study exists.

Hydra's basic sweeper composes a job's config only when it launches that job, so a mistake in the
last point of a grid (``model.hidden=64,0``) would surface after the first points trained. Here the
points are spelled out as the basic sweeper does (the cartesian product of the sweep overrides, in
order), each is composed with Hydra's compose API and checked against its recipe; the first point
refused is one line naming it, exit status 2, before anything runs or a sweep folder is made.

An Optuna search (``hydra.sweeper.params``) samples its points as it goes, so what is checked are the
values a trial can take at the edges: each choice, each end of an interval. A bound the option refuses
(``model.hidden: int(interval(0, 64))``) is found before the study exists, not as a failed trial that a
rerun of the fixed command would run again.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hydra import compose
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep, Override
from omegaconf import DictConfig, OmegaConf

from gsr_train.options.check import RecipeError, check_recipe
from gsr_train.options.inputs import composed_problems

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"  # the sweeper of a plain -m


def _choices(override: Override) -> list[str]:
    """``key=value`` for each value a (list or range) sweep takes; the override itself otherwise."""
    if not override.is_sweep_override():
        return [str(override.input_line)]
    key = override.get_key_element()
    return [f"{key}={value}" for value in override.sweep_string_iterator()]


def sweep_points(task_overrides: Sequence[str]) -> list[list[str]]:
    """The override lists of a grid's jobs, in the basic sweeper's order."""
    parsed = OverridesParser.create().parse_overrides(list(task_overrides))
    if any(o.is_sweep_override() and o.is_interval_sweep() for o in parsed):
        return []  # an interval is a search space (Optuna's), not a grid
    return [list(point) for point in itertools.product(*(_choices(o) for o in parsed))]


def search_edges(params: dict, task_overrides: Sequence[str]) -> list[tuple[str, list[str]]]:
    """For each value at an edge of an Optuna search space: ``(what, the overrides of a trial there)``;
    the other parameters keep the experiment's own values, so a refusal names the edge that caused it."""
    parser = OverridesParser.create()
    fixed = [o for o in task_overrides if not parser.parse_override(o).is_sweep_override()]
    spaces = [*(f"{k}={v}" for k, v in params.items()), *(o for o in task_overrides if o not in fixed)]
    by_key = {o.get_key_element(): o for o in parser.parse_overrides(spaces)}  # the command line's win
    return [
        (f"{key}={value}, {what}", [*fixed, f"{key}={value}"]) for key, o in by_key.items() for what, value in _edges(o)
    ]


def _edges(override: Override) -> list[tuple[str, str]]:
    """``(what, value)`` at the edges of one parameter's space: an interval's ends, every choice."""
    sweep = override.value()
    if isinstance(sweep, IntervalSweep):
        return [("the interval's lower end", str(sweep.start)), ("its upper end", str(sweep.end))]
    if override.is_sweep_override():
        return [("one of its choices", value) for value in override.sweep_string_iterator()]
    return [("its value", str(override.value()))]


def _check(config_name: str, overrides: list[str]) -> None:
    """One point's options, then its data folder and split files (`gsr_train.options.inputs`)."""
    cfg = compose(config_name=config_name, overrides=overrides)
    check_recipe(cfg)
    problems = composed_problems(cfg)
    if problems:
        raise RecipeError("; ".join(problems))


def check_sweep_points(config: DictConfig) -> None:
    """Each point of the multirun ``config`` composed and checked (an Optuna search: the edges of its
    space); a refusal names its point."""
    task = list(OmegaConf.select(config, "hydra.overrides.task", default=[]) or [])
    config_name = str(OmegaConf.select(config, "hydra.job.config_name", default="config"))
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None)
    if OmegaConf.select(config, "hydra.sweeper._target_") != BASIC_SWEEPER:
        if isinstance(params, DictConfig) and len(params):
            for what, overrides in search_edges(dict(params), task):
                try:
                    _check(config_name, overrides)
                except RecipeError as err:
                    raise RecipeError(f"hydra.sweeper.params: {what}: {err}; no study was made") from None
        return
    points = sweep_points(task)
    for number, point in enumerate(points if len(points) > 1 else []):
        try:
            _check(config_name, point)
        except RecipeError as err:
            changed = " ".join(p for p, q in zip(point, points[0]) if p != q) or " ".join(point)
            raise RecipeError(f"sweep point {number} of {len(points)} ({changed}): {err}; nothing ran") from None
