"""How a method outside gsr-train is found, for retrievers and readers alike: a ``_target_`` import
path (Hydra's convention) or an entry point of an installed package, loaded only when asked for, so
a broken plugin fails where it is used and is named in one line (``error``: the caller's UserError)."""

from __future__ import annotations

from collections.abc import MutableMapping
from importlib.metadata import entry_points
from typing import Any

import hydra.utils


def load_entry_point(
    registry: MutableMapping[str, Any], group: str, name: str, error: type[Exception], kind: str
) -> Any:
    """``registry[name]``, loading that one entry point of ``group`` first if it is not registered yet."""
    if name not in registry:
        for ep in entry_points(group=group, name=name):
            try:
                registry[name] = ep.load()
            except Exception as e:  # noqa: BLE001 - an installed plugin that cannot load is named, not raised
                raise error(
                    f"{kind} {name!r}: its entry point {ep.value} cannot be loaded ({type(e).__name__}: {e}); "
                    "is the package that declares it installed in this environment?"
                ) from None
            break
    return registry.get(name)


def import_target(target: str, error: type[Exception], option: str) -> Any:
    """What ``option=target`` names (an import path); a failure is the user's to fix, in one line."""
    try:
        return hydra.utils.get_object(str(target))
    except Exception as e:  # noqa: BLE001 - any import failure is the user's path to fix
        raise error(f"{option}={target}: cannot import it ({type(e).__name__}: {e})") from None


def plugin_names(registry: MutableMapping[str, Any], group: str) -> list[str]:
    """Every registered name, the entry points of installed packages included."""
    return sorted(set(registry) | {ep.name for ep in entry_points(group=group)})
