"""Build a retriever by name or by import path: the built-in ones
(:mod:`gsr_train.retrievers.registered`), any other registered with
:func:`gsr_train.retrievers.interface.register`, the ``gsr_train.retrievers`` entry points of
installed packages, and a class or factory outside this package named by ``_target_`` (Hydra's
convention: ``retriever._target_=my_pkg.module.MyRetriever``), so a new method joins without an
edit here."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

import hydra.utils

from gsr_train.data.errors import UserError
from gsr_train.models.edge_scorer import EdgeScorerModule
from gsr_train.retrievers import registered  # noqa: F401  (registers the built-in retrievers)
from gsr_train.retrievers.interface import REGISTRY, RetrievalInputs, Retriever

ENTRY_POINTS = "gsr_train.retrievers"


class RetrieverError(UserError, ValueError):
    """An unknown retriever name or a target that is not a retriever."""


def _lookup(name: str) -> Any:
    """The factory (or trainable class) registered as ``name``, loading only that entry point of the
    installed packages: a broken plugin fails where it is asked for, not in every other run."""
    if name not in REGISTRY:
        for ep in entry_points(group=ENTRY_POINTS, name=name):
            try:
                REGISTRY[name] = ep.load()
            except Exception as e:  # noqa: BLE001 - an installed plugin that cannot load is named, not raised
                raise RetrieverError(
                    f"retriever {name!r}: its entry point {ep.value} cannot be loaded ({type(e).__name__}: {e}); "
                    "is the package that declares it installed in this environment?"
                ) from None
            break
    return REGISTRY.get(name)


def _imported(target: str) -> Any:
    """What ``retriever._target_`` names (Hydra's import-path lookup); a failure is the user's to fix."""

    try:
        return hydra.utils.get_object(str(target))
    except Exception as e:  # noqa: BLE001 - any import failure is the user's path to fix
        raise RetrieverError(f"retriever._target_={target}: cannot import it ({type(e).__name__}: {e})") from None


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
    :class:`~gsr_train.models.edge_scorer.EdgeScorerModule` subclass), else None."""
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
    return sorted(set(REGISTRY) | {ep.name for ep in entry_points(group=ENTRY_POINTS)})
