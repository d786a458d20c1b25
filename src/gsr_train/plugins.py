"""How a method outside gsr-train is found, for retrievers and readers alike: a ``_target_`` import
path (Hydra's convention) or an entry point of an installed package, loaded only when asked for, so
a broken plugin fails where it is used and is named in one line (``error``: the caller's UserError)."""

from __future__ import annotations

import importlib
from collections.abc import MutableMapping
from importlib.metadata import entry_points
from typing import Any


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
    """What ``option=target`` names (an import path); a failure is the user's to fix, in one line
    (``hydra.utils.get_object`` would also log its own multi-line ``[ERROR]`` block first)."""
    try:
        return locate(str(target))
    except Exception as e:  # noqa: BLE001 - any import failure is the user's path to fix
        reason = " ".join(str(e).split())  # a plugin's own multi-line error, on the one line
        raise error(f"{option}={target}: cannot import it ({type(e).__name__}: {reason})") from None


def locate(path: str) -> Any:
    """The object at a dotted import path ``pkg.module.Name``: the longest importable module prefix,
    then attributes. A module that exists but fails on an import of its own raises that error."""
    parts = path.split(".")
    if not all(p.isidentifier() for p in parts):
        raise ImportError(f"{path!r} is not a dotted import path (pkg.module.Name)")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is None or not (name == e.name or name.startswith(e.name + ".")):
                raise  # the module is there; something it imports is not
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                raise AttributeError(f"{name} has no attribute {attr!r}")
            obj, name = getattr(obj, attr), f"{name}.{attr}"
        return obj
    raise ModuleNotFoundError(f"no module named {parts[0]!r}; is the package that holds it installed here?")


def plugin_names(registry: MutableMapping[str, Any], group: str) -> list[str]:
    """Every registered name, the entry points of installed packages included."""
    return sorted(set(registry) | {ep.name for ep in entry_points(group=group)})
