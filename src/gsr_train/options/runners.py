"""``runner: NAME``: which runner an experiment names, checked with its other options before any
work. A built-in name (`gsr_train.options.recipes.RECIPES`), a module ``gsr_train.runs.NAME``
with a ``run`` function (a new built-in experiment kind, with no table to edit), or the dotted path
of a function of the user's own; anything else is one line naming the built-in runners."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from gsr_train.data.errors import UserError
from gsr_train.options.recipes import RECIPES, runner_name
from gsr_train.plugins import import_target


class UnknownRunner(UserError, ValueError):
    """An experiment's ``runner`` that is neither a built-in name nor an importable function."""


def find_runner(value: Any, built_in: Mapping[str, Any]) -> Any:
    """``built_in[NAME]``, ``gsr_train.runs.NAME.run`` or the function at a dotted path; else
    `UnknownRunner` (a runner module that fails to import raises its own error)."""
    name = runner_name(value)
    if name in built_in:
        return built_in[name]
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
        found = import_target(name, UnknownRunner, "runner")
        if not callable(found):
            raise UnknownRunner(f"runner={name}: not a function")
        return found
    raise UnknownRunner(
        f"runner={name}: not a runner; built in: {', '.join(built_in)} (or a dotted path to a function of your own)"
    )


def runner_error(value: Any) -> str | None:
    """The one line refusing ``runner: value``, or None when it names a runner (or is not set yet)."""
    if value is None or str(value) == "???":
        return None
    try:
        find_runner(value, dict.fromkeys(RECIPES))  # the names are enough here
    except UnknownRunner as e:
        return str(e)
    return None
