"""Build a reader by name or by import path: the built-in ones (`gsr_train.readers.registered`),
any other registered with `gsr_train.readers.interface.register`, the ``gsr_train.readers``
entry points of installed packages, and a class or factory outside this package named by
``_target_`` (Hydra's convention: ``qa.reading._target_=my_pkg.module.MyReader``), so a new reader
joins without an edit here. Every one is made as ``factory(inputs=ReadingInputs, **options)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gsr_train.data.errors import UserError
from gsr_train.plugins import import_target, load_entry_point, plugin_names
from gsr_train.readers import registered  # noqa: F401  (registers the built-in readers)
from gsr_train.readers.interface import REGISTRY, Factory, Reader, ReadingInputs, is_trainable

ENTRY_POINTS = "gsr_train.readers"


class ReaderError(UserError, ValueError):
    """An unknown reader name, a target that is not a reader, or options its factory refuses."""


def _lookup(name: str) -> Factory | None:
    """The factory registered as ``name`` (its entry point loaded on first use)."""
    return load_entry_point(REGISTRY, ENTRY_POINTS, name, ReaderError, "reader")


def resolve(name: str | None = None, target: str | None = None) -> Factory:
    """The factory behind ``qa.reading.method=name`` or ``qa.reading._target_=target`` (the target
    wins); an unknown name lists the known ones, in one line."""
    if target:
        found = import_target(target, ReaderError, "qa.reading._target_")
        if not callable(found):
            raise ReaderError(f"qa.reading._target_={target} is not a class or a function")
        return found
    factory = _lookup(str(name))
    if factory is None:
        raise ReaderError(
            f"unknown reader {name!r}; registered: {', '.join(names())} (or give "
            "qa.reading._target_=<module.Class> for one outside gsr-train)"
        )
    return factory


def trainable(name: str | None = None, target: str | None = None) -> bool:
    """Does the reader named ``name`` (or ``target``) train?"""
    return is_trainable(resolve(name, target))


def build(
    name: str | None, options: Mapping[str, Any] | None, inputs: ReadingInputs, target: str | None = None
) -> Reader:
    """``factory(inputs=inputs, **options)`` of the reader named ``name`` (or ``target``), checked to
    be a reader; options it refuses (a ValueError or TypeError) are one line."""
    factory = resolve(name, target)
    label = f"qa.reading._target_={target}" if target else f"reader {name!r}"
    try:
        made = factory(inputs=inputs, **dict(options or {}))
    except (ValueError, TypeError) as e:  # its options checked when it is made: the user's to fix
        raise ReaderError(str(e) if str(e).startswith(label) else f"{label}: {e}") from None
    if not isinstance(made, Reader):
        raise ReaderError(
            f"{label} does not follow gsr_train.readers.interface.Reader (a `name`, "
            "`prepare(questions, evidence) -> examples` and `answer(examples) -> readings`)"
        )
    return made


def names() -> list[str]:
    """Every registered reader name (entry points of installed packages included)."""
    return plugin_names(REGISTRY, ENTRY_POINTS)
