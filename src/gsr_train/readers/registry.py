"""Build a reader by name or by import path: the built-in ones (`gsr_train.readers.registered`),
any other registered with `gsr_train.readers.interface.register`, the ``gsr_train.readers``
entry points of installed packages, and a class or factory outside this package named by
``_target_`` (Hydra's convention: ``qa.reading._target_=my_pkg.module.MyReader``), so a new reader
joins without an edit here. Every one is made as ``factory(inputs=ReadingInputs, **options)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gsr_train.readers import registered  # noqa: F401  (registers the built-in readers)
from gsr_train.readers.interface import REGISTRY, Factory, Reader, ReaderError, ReadingInputs, is_trainable

__all__ = ["ReaderError", "build", "names", "resolve", "trainable"]


def resolve(name: str | None = None, target: str | None = None) -> Factory:
    """The factory behind ``qa.reading.method=name`` or ``qa.reading._target_=target`` (the target
    wins); an unknown name lists the known ones, in one line."""
    return REGISTRY.resolve(name, target)


def trainable(name: str | None = None, target: str | None = None) -> bool:
    """Does the reader named ``name`` (or ``target``) train?"""
    return is_trainable(resolve(name, target))


def build(
    name: str | None, options: Mapping[str, Any] | None, inputs: ReadingInputs, target: str | None = None
) -> Reader:
    """``factory(inputs=inputs, **options)`` of the reader named ``name`` (or ``target``), checked to
    be a reader; options it refuses (a ValueError or TypeError) are one line."""
    made = REGISTRY.build(name, options, target, inputs=inputs)
    if not isinstance(made, Reader):
        raise ReaderError(
            f"{REGISTRY.label(name, target)} does not follow gsr_train.readers.interface.Reader (a `name`, "
            "`prepare(questions, evidence) -> examples` and `answer(examples) -> readings`)"
        )
    return made


def names() -> list[str]:
    """Every registered reader name (entry points of installed packages included)."""
    return REGISTRY.names()
