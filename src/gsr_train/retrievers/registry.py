"""Build a retriever by name or by import path: the built-in ones
(`gsr_train.retrievers.registered`), any other registered with
`gsr_train.retrievers.interface.register`, the ``gsr_train.retrievers`` entry points of
installed packages, and a class or factory outside this package named by ``_target_`` (Hydra's
convention: ``retriever._target_=my_pkg.module.MyRetriever``), so a new method joins without an
edit here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gsr_train.models.edge_scorer import EdgeScorerModule
from gsr_train.retrievers import registered  # noqa: F401  (registers the built-in retrievers)
from gsr_train.retrievers.interface import REGISTRY, RetrievalInputs, Retriever, RetrieverError

__all__ = ["RetrieverError", "build", "build_target", "names", "trainable"]


def build(name: str, options: Mapping[str, Any] | None, inputs: RetrievalInputs) -> Retriever:
    """The retriever registered as ``name``, made from ``options``; an unknown name lists the known ones."""
    if trainable(name) is not None:
        raise RetrieverError(
            f"retriever {name!r} is a trainable scorer: train it with python train.py +experiment=retrieve "
            f"retriever.name={name}, then serve its checkpoint as retriever 'trained' (options.checkpoint=...)"
        )
    return _checked(REGISTRY.build(name, options, inputs=inputs), name)


def build_target(target: str, options: Mapping[str, Any] | None, inputs: RetrievalInputs) -> Retriever:
    """``target(inputs=inputs, **options)``: a class or factory named by its import path."""
    if trainable(target=target) is not None:
        raise RetrieverError(
            f"retriever._target_={target} is a trainable scorer: train it with python train.py "
            "+experiment=retrieve, then serve its checkpoint as retriever 'trained' (options.checkpoint=...)"
        )
    return _checked(REGISTRY.build(None, options, target, inputs=inputs), str(target))


def trainable(name: str | None = None, target: str | None = None) -> type[EdgeScorerModule] | None:
    """The trainable scorer class behind a retriever name or ``_target_`` (an
    `gsr_train.models.edge_scorer.EdgeScorerModule` subclass), else None."""
    if not (name or target):
        return None
    found = REGISTRY.resolve(target=target) if target else REGISTRY.find(str(name))  # unknown: build() says so
    return found if isinstance(found, type) and issubclass(found, EdgeScorerModule) else None


def _checked(retriever: Any, name: str) -> Retriever:
    if not isinstance(retriever, Retriever):
        raise RetrieverError(
            f"retriever {name!r} does not follow gsr_train.retrievers.interface.Retriever "
            "(a `name` and a `score(split) -> (per-edge scores, extra figures)` method)"
        )
    return retriever


def names() -> list[str]:
    """Every registered retriever name (entry points of installed packages included)."""
    return REGISTRY.names()
