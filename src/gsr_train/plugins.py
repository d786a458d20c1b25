"""How a method outside gsr-train is found, for retrievers and readers alike: a ``_target_`` import
path (Hydra's convention) or an entry point of an installed package, loaded only when asked for, so
a broken plugin fails where it is used and is named in one line (``error``: the caller's UserError)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from importlib.metadata import entry_points
from typing import Any, TypeVar


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


def plugin_names(registered: Iterable[str], group: str) -> list[str]:
    """Every registered name, the entry points of installed packages included."""
    return sorted(set(registered) | {ep.name for ep in entry_points(group=group)})


T = TypeVar("T")


class Registry(dict[str, T]):
    """One name -> factory table, the same for every plugin family (retrievers, readers, prompt
    formats, runners, exporters): built-ins added with `register`, the entry points of installed
    packages (``group``) loaded on first use, and a class or function outside gsr-train named by its
    import path (``target_option``, Hydra's ``_target_`` convention). Every one is made the same way,
    ``factory(inputs=..., **options)`` (`build`), and refused in the same words (``error``)."""

    def __init__(
        self, kind: str, *, error: type[Exception], group: str | None = None, target_option: str | None = None
    ) -> None:
        super().__init__()
        self.kind, self.error, self.group, self.target_option = kind, error, group, target_option
        self.deferred: dict[str, str] = {}  # name -> import path of a built-in imported on first use

    def copy(self) -> Registry[T]:  # type: ignore[override]
        """A registry of the same family holding the same entries (a test's scratch copy)."""
        twin: Registry[T] = Registry(self.kind, error=self.error, group=self.group, target_option=self.target_option)
        twin.update(self)
        twin.deferred.update(self.deferred)
        return twin

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: make ``factory`` buildable as ``name`` (a second, different one is refused)."""

        def add(factory: T) -> T:
            if name in self and self[name] is not factory:
                raise ValueError(f"a {self.kind} named {name!r} is already registered")
            self[name] = factory
            return factory

        return add

    def register_deferred(self, name: str, path: str) -> None:
        """Make the object at the import path ``path`` buildable as ``name``, imported when ``name`` is
        first looked up: a built-in whose module is heavy (GNN-RAG imports PyG, seconds at start-up)
        costs nothing to the runs that do not use it."""
        if name in self or name in self.deferred:
            raise ValueError(f"a {self.kind} named {name!r} is already registered")
        self.deferred[name] = path

    def find(self, name: str) -> T | None:
        """``self[name]``: a deferred built-in imported, or that one entry point of `group` loaded,
        first if it is not registered yet."""
        if name not in self and name in self.deferred:
            self[name] = locate(self.deferred[name])
        if self.group is not None and name not in self:
            load_entry_point(self, self.group, name, self.error, self.kind)
        return self.get(name)

    def names(self) -> list[str]:
        """Every registered name, deferred built-ins and the entry points of installed packages included."""
        known = set(self) | set(self.deferred)
        return plugin_names(known, self.group) if self.group is not None else sorted(known)

    def resolve(self, name: str | None = None, target: str | None = None) -> T:
        """The factory behind ``name`` or the import path ``target`` (the target wins); an unknown name
        lists the known ones, in one line."""
        if target:
            found = import_target(target, self.error, str(self.target_option))
            if not callable(found):
                raise self.error(f"{self.target_option}={target} is not a class or a function")
            return found
        factory = self.find(str(name))
        if factory is None:
            raise self.error(self.unknown(name))
        return factory

    def unknown(self, name: Any) -> str:
        """The one line refusing an unknown ``name``."""
        outside = (
            f" (or give {self.target_option}=<module.Class> for one outside gsr-train)" if self.target_option else ""
        )
        return f"unknown {self.kind} {name!r}; registered: {', '.join(self.names())}{outside}"

    def label(self, name: str | None, target: str | None = None) -> str:
        """How a refusal names what it refuses: ``retriever._target_=pkg.Cls`` or ``retriever 'cosine'``."""
        return f"{self.target_option}={target}" if target else f"{self.kind} {name!r}"

    def build(
        self, name: str | None, options: Mapping[str, Any] | None, target: str | None = None, **inputs: Any
    ) -> Any:
        """``factory(**inputs, **options)`` of ``name`` (or ``target``); options it refuses (a ValueError
        or TypeError raised when it is made) are one line naming it."""
        factory = self.resolve(name, target)
        label = self.label(name, target)
        try:
            return factory(**inputs, **dict(options or {}))  # type: ignore[operator]
        except (ValueError, TypeError) as e:  # its options checked when it is made: the user's to fix
            raise self.error(str(e) if str(e).startswith(label) else f"{label}: {e}") from None
