"""Build a retriever by name: the built-in ones (:mod:`gsr_train.retrievers.registered`) and any
other registered with :func:`gsr_train.retrievers.interface.register`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gsr_train.retrievers import registered  # noqa: F401  (registers the built-in retrievers)
from gsr_train.retrievers.interface import REGISTRY, RetrievalInputs, Retriever


def build(name: str, options: Mapping[str, Any] | None, inputs: RetrievalInputs) -> Retriever:
    """The retriever registered as ``name``, made from ``options``; an unknown name lists the known ones."""
    if name not in REGISTRY:
        raise ValueError(f"unknown retriever {name!r}; registered: {sorted(REGISTRY)}")
    retriever = REGISTRY[name](dict(options or {}), inputs)
    if not isinstance(retriever, Retriever):
        raise TypeError(f"retriever {name!r} does not follow gsr_train.retrievers.interface.Retriever")
    return retriever


def names() -> list[str]:
    """Every registered retriever name."""
    return sorted(REGISTRY)
