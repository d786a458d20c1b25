"""Build a retriever by name or by import path: the built-in ones
(`gsr_train.retrievers.registered`), any other registered with
`gsr_train.retrievers.interface.register`, the ``gsr_train.retrievers`` entry points of
installed packages, and a class or factory outside this package named by ``_target_`` (Hydra's
convention: ``retriever._target_=my_pkg.module.MyRetriever``), so a new method joins without an
edit here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gsr_train.data.errors import UserError
from gsr_train.models.edge_scorer import EdgeScorerModule
from gsr_train.plugins import import_target, load_entry_point, plugin_names
from gsr_train.retrievers import registered  # noqa: F401  (registers the built-in retrievers)
from gsr_train.retrievers.interface import REGISTRY, RetrievalInputs, Retriever

ENTRY_POINTS = "gsr_train.retrievers"


class RetrieverError(UserError, ValueError):
    """An unknown retriever name or a target that is not a retriever."""


def _lookup(name: str) -> Any:
    """The factory (or trainable class) registered as ``name`` (its entry point loaded on first use)."""
    return load_entry_point(REGISTRY, ENTRY_POINTS, name, RetrieverError, "retriever")


def _imported(target: str) -> Any:
    """What ``retriever._target_`` names; a failure is the user's to fix."""
    return import_target(target, RetrieverError, "retriever._target_")


def build(name: str, options: Mapping[str, Any] | None, inputs: RetrievalInputs) -> Retriever:
    """The retriever registered as ``name``, made from ``options``; an unknown name lists the known ones."""
    if _lookup(name) is None:
        raise RetrieverError(
            f"unknown retriever {name!r}; registered: {', '.join(sorted(REGISTRY))} (or give "
            "retriever._target_=<module.Class> for one outside gsr-train)"
        )
    if trainable(name) is not None:
        raise RetrieverError(
            f"retriever {name!r} is a trainable scorer: train it with python train.py +experiment=retrieve "
            f"retriever.name={name}, then serve its checkpoint as retriever 'trained' (options.checkpoint=...)"
        )
    try:
        made = REGISTRY[name](dict(options or {}), inputs)
    except (ValueError, TypeError) as e:  # its options checked when it is made: the user's to fix
        message = str(e) if str(e).startswith(f"retriever {name!r}") else f"retriever {name!r}: {e}"
        raise RetrieverError(message) from None
    return _checked(made, name)


def build_target(target: str, options: Mapping[str, Any] | None, inputs: RetrievalInputs) -> Retriever:
    """``target(inputs=inputs, **options)``: a class or factory named by its import path."""
    factory = _imported(target)
    if not callable(factory):
        raise RetrieverError(f"retriever._target_={target} is not a class or a function")
    if isinstance(factory, type) and issubclass(factory, EdgeScorerModule):
        raise RetrieverError(
            f"retriever._target_={target} is a trainable scorer: train it with python train.py "
            "+experiment=retrieve, then serve its checkpoint as retriever 'trained' (options.checkpoint=...)"
        )
    try:
        made = factory(inputs=inputs, **dict(options or {}))
    except (ValueError, TypeError) as e:
        raise RetrieverError(f"retriever._target_={target}: {e}") from None
    return _checked(made, str(target))


def trainable(name: str | None = None, target: str | None = None) -> type[EdgeScorerModule] | None:
    """The trainable scorer class behind a retriever name or ``_target_`` (an
    `gsr_train.models.edge_scorer.EdgeScorerModule` subclass), else None."""
    if target:
        found = _imported(target)
    elif name:
        found = _lookup(name)
    else:
        return None
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
    return plugin_names(REGISTRY, ENTRY_POINTS)
