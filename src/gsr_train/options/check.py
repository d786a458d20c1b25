"""A composed config checked against its runner's recipe by pydantic, before any work.

pydantic validates the option dataclasses themselves (no unknown keys, no type coercion, the
ranges their fields declare); the sections of a runner's `gsr_train.options.recipes.Recipe`
make one dataclass of the whole config, and pydantic's errors become one line each: the key, the
value and what it should be, the file that defines it, and for an unknown key the closest option.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import types
import typing
from collections.abc import Hashable, Iterator, Mapping
from typing import Any, Literal, TypeVar, cast

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import TypeAdapter, ValidationError

from gsr_train.config import as_dict, project_root
from gsr_train.data.errors import UserError
from gsr_train.options.recipes import COMMON, DATA_FILE, RECIPES, RENAMED, DataOptions, Recipe, TopLevel, runner_name
from gsr_train.options.runners import runner_error

T = TypeVar("T")


class RecipeError(UserError, ValueError):
    """Options the runner does not have (one of the user's mistakes: reported without a traceback)."""


# ------------------------------------------------------------------ pydantic on the dataclasses
@functools.cache
def _adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


def validation_errors(cls: type, cfg: Mapping[str, Any]) -> list[Any]:
    """pydantic's errors for the plain config ``cfg`` read as the option dataclass ``cls``: strict
    types, every key the class does not declare, the ranges its fields declare in their metadata.

    The config goes in as JSON because that is where pydantic's strict mode reads a mapping as a
    dataclass (from Python objects it wants instances); no unknown key is allowed anywhere, and
    `option_errors` lets through those under a class that says ``OPEN``."""
    try:
        _adapter(cls).validate_json(json.dumps(cfg, default=str), strict=True, extra="forbid")
    except ValidationError as e:
        return e.errors()
    return []


def built(cls: type[T], node: Any) -> T:
    """A checked config's section ``node`` (a DictConfig, a mapping, None) as an instance of its
    recipe dataclass ``cls``, nested sections included: what a runner's stages read after the check,
    in place of the config (a key the config leaves out has the field's default; interpolations are
    resolved; keys an ``OPEN`` section lets through are left out)."""
    try:
        values = (
            OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
            if isinstance(node, DictConfig)
            else dict(node or {})
        )
        return _adapter(cast(Hashable, cls)).validate_python(values, extra="ignore")
    except ValidationError as e:
        first = e.errors()[0]
        raise RecipeError(f"{cls.__name__} options: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    except OmegaConfBaseException as e:  # what the check leaves for later: a ??? never filled, a ${...}
        what = str(e).splitlines()[0]
        raise RecipeError(f"{cls.__name__} options: {getattr(e, 'full_key', None) or '?'}: {what}") from None


def fields_of(cls: type) -> dict[str, tuple[Any, Mapping[str, Any]]]:
    """name -> (type hint, metadata) of a dataclass's fields."""
    hints = typing.get_type_hints(cls)
    return {f.name: (hints[f.name], f.metadata) for f in dataclasses.fields(cls)}


# ------------------------------------------------------------------ the whole config
def _sections(cfg: Mapping[str, Any], recipe: Recipe | None) -> tuple[tuple[str, type], ...]:
    """The dataclass of each section of the runner (a model section's by its family)."""
    picks = recipe.sections.items() if recipe is not None else ()
    return tuple((name, p if isinstance(p, type) else p(_mapping(cfg.get(name)))) for name, p in picks)


def _mapping(node: Any) -> Mapping[str, Any]:
    return node if isinstance(node, Mapping) else {}


@functools.cache
def _root(runner: str | None, sections: tuple[tuple[str, type], ...]) -> type:
    """The dataclass of a whole config of ``runner``: its top-level keys (typed where the recipe
    types them), ``data`` and its sections. None: a runner of the user's own, whose keys are its
    business (only the common keys' types are checked)."""
    recipe = RECIPES.get(runner) if runner is not None else None
    typed = fields_of(recipe.top if recipe is not None else TopLevel)
    keys = dict.fromkeys([*COMMON, *recipe.top_level] if recipe is not None else [*COMMON, *typed])
    fields: list[Any] = [
        (key, *typed[key][:1], dataclasses.field(default=None, metadata=typed[key][1]))
        if key in typed
        else (key, Any, None)
        for key in keys
        if key != "data"
    ]
    fields += [("data", DataOptions, None), *((name, cls, None) for name, cls in sections)]
    return dataclasses.make_dataclass(f"{runner}Config", fields, namespace={"OPEN": recipe is None})


# ------------------------------------------------------------------ pydantic's errors as lines
def unset(value: Any) -> bool:
    """A value that is resolved later (an interpolation) or filled in by the user (``???``)."""
    return isinstance(value, str) and ("${" in value or value == "???")


def item_class(hint: Any) -> type | None:
    """The dataclass of a ``list[SomeDataclass]`` hint (optional or not), else None."""
    for h in (hint, *typing.get_args(hint)):
        if (typing.get_origin(h) or h) is list:
            items = typing.get_args(h)[:1]
            if items and isinstance(items[0], type) and dataclasses.is_dataclass(items[0]):
                return items[0]
    return None


def dataclass_in(hint: Any) -> type | None:
    """The dataclass of a hint (``X`` or ``X | None``), else None."""
    for h in (hint, *typing.get_args(hint)):
        if isinstance(h, type) and dataclasses.is_dataclass(h):
            return h
    return None


@dataclasses.dataclass
class _Spot:
    """Where an error's location points: the dotted key, the field's type and range."""

    key: str
    hint: Any
    meta: Mapping[str, Any]
    depth: int  # how many parts of the location lead to the field


def _locate(root: type, loc: tuple[Any, ...]) -> _Spot:
    """The field an error at ``loc`` belongs to: descends into dataclasses and lists of them, skips
    pydantic's union tags, stops at a list of plain values (its item's error is the field's)."""
    spot = _Spot("", root, {}, 0)
    for depth, part in enumerate(loc):
        cls = dataclass_in(spot.hint)
        if isinstance(part, int):
            item = item_class(spot.hint)
            if item is None:
                break
            spot = _Spot(f"{spot.key}[{part}]", item, {}, depth + 1)
        elif cls is not None and part in (known := fields_of(cls)):
            hint, meta = known[part]
            spot = _Spot(f"{spot.key}.{part}" if spot.key else str(part), hint, meta, depth + 1)
        elif cls is not None:
            break  # an unknown key under cls
    return spot


def expected(hint: Any) -> str:
    """How a type hint reads in an error: ``an integer``, ``a number or null``, ..."""
    if hint is Any:
        return "anything"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(expected(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join("null" if a is None else str(a) for a in args)
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}
    if hint in names:
        return names[hint]
    if (origin or hint) in (list, tuple):
        if not args:
            return "a list"
        if typing.get_origin(args[0]) is Literal:
            return "a list of " + " / ".join(map(str, typing.get_args(args[0])))
        return f"a list of {expected(args[0]).removeprefix('an ').removeprefix('a ')}s"
    return "a mapping"


def bounds(meta: Mapping[str, Any]) -> str:
    """A field's range: ``>= 1``, ``> 0``, ``in [0, 1]``, ``in (0, 1)``, or nothing."""
    low = ("[", meta["ge"]) if "ge" in meta else ("(", meta["gt"]) if "gt" in meta else None
    high = (meta["le"], "]") if "le" in meta else (meta["lt"], ")") if "lt" in meta else None
    if low and high:
        return f"in {low[0]}{low[1]}, {high[0]}{high[1]}"
    if low:
        return f"{'>=' if low[0] == '[' else '>'} {low[1]}"
    return f"{'<=' if high[1] == ']' else '<'} {high[0]}" if high else ""


def type_text(hint: Any, meta: Mapping[str, Any]) -> str:
    """A field's type and range in words: ``an integer >= 1``, ``a non-empty list of integers``."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
        return type_text(next(a for a in args if a is not type(None)), meta) + " or null"
    text = expected(hint)
    if meta.get("min_length"):
        return f"a non-empty {text.removeprefix('a ')}"
    return f"{text} {bounds(meta)}".strip()


def _range(meta: Mapping[str, Any], hint: Any) -> str:
    """What a value out of its field's range should be: ``>= 1``, ``in [0, 1]``, ``a number > 0``."""
    if meta.get("min_length"):
        return type_text(hint, meta)
    text = bounds(meta)
    return f"a number {text}" if text.startswith("> ") else text or "something else"


UNKNOWN_KEY = "unexpected_keyword_argument"  # pydantic's error for a key a dataclass does not declare
RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_short", "too_long"}


def _at(cfg: Any, loc: tuple[Any, ...]) -> Any:
    """The value of the plain config at a location made of keys and list indices."""
    for part in loc:
        cfg = cfg[part]
    return cfg


def _leaves(cls: type, prefix: str) -> Iterator[str]:
    """Every dotted option under a dataclass."""
    for name, (hint, _) in fields_of(cls).items():
        yield f"{prefix}.{name}"
        if (inner := dataclass_in(hint)) is not None:
            yield from _leaves(inner, f"{prefix}.{name}")


def _closest(key: str, known: list[str], section: type | None) -> str:
    """``; did you mean X?`` (a sibling, else an option of that name deeper in the section), or the
    known names at that level."""
    parent, _, leaf = key.rpartition(".")
    close = difflib.get_close_matches(leaf, known, n=1)
    if close:
        return f"; did you mean {parent}.{close[0]}?"
    head = key.split(".", 1)[0]
    deeper = [k for k in _leaves(section, head) if k.startswith(parent + ".")] if section is not None else []
    same = [k for k in deeper if k.rpartition(".")[2] == leaf] or difflib.get_close_matches(
        key, deeper, n=1, cutoff=0.8
    )
    return f"; did you mean {same[0]}?" if same else f" (known: {', '.join(known)})"


# ------------------------------------------------------------------ where a section comes from
GROUPS = {"model": "name", "reader": "name", "patterns": "source"}  # group folder -> key naming its file


def section_file(section: str, node: Any, recipe: Recipe) -> str:
    """The file that defines ``section``: the chosen group file when the section is a config group."""
    if section in GROUPS and isinstance(node, Mapping) and node.get(GROUPS[section]):
        path = f"conf/{section}/{node[GROUPS[section]]}.yaml"
        if (project_root() / path).exists():
            return path
    if section == "llm":
        return "conf/llm/ (llm=...)"
    if section == "classic":
        return "conf/recipes/classic_defaults.yaml"
    if section == "open_ended":
        return "conf/recipes/okgqa_defaults.yaml"
    return recipe.file


def _file(key: str, cfg: Mapping[str, Any], recipe: Recipe | None) -> str:
    head = key.split(".", 1)[0].split("[", 1)[0]
    if head == "data":
        return DATA_FILE
    if recipe is None or (head not in recipe.sections and head not in recipe.top_level):
        return "conf/config.yaml"
    return section_file(head, cfg.get(head), recipe) if head in recipe.sections else recipe.file


# ------------------------------------------------------------------ the checks
def model_family_error(cfg: Mapping[str, Any]) -> str | None:
    """``model=gsr_tiny`` on a SubgraphRAG experiment: one line naming the models the runner trains."""
    recipe = RECIPES.get(runner_name(cfg.get("runner")))
    model = cfg.get("model")
    if recipe is None or not recipe.families or not isinstance(model, Mapping):
        return None
    family = model.get("family")
    if family in recipe.families:
        return None
    fits = family_models(recipe.families)
    return (
        f"model={model.get('name', '?')} is a {family or 'unknown'} model; the {runner_name(cfg.get('runner'))} "
        f"runner needs a {' / '.join(recipe.families)} model: model={' | '.join(fits)} (conf/model/)"
    )


def family_models(families: tuple[str, ...]) -> list[str]:
    """The model files (conf/model/NAME.yaml) of ``families``."""
    return [p.stem for p in sorted((project_root() / "conf" / "model").glob("*.yaml")) if _family(p) in families]


def _family(path: Any) -> Any:
    try:
        return (yaml.safe_load(path.read_text()) or {}).get("family")
    except (OSError, yaml.YAMLError, AttributeError):
        return None


def _renamed(cfg: Mapping[str, Any], runner: str) -> list[str]:
    """An option given by its old name: one line naming the new one."""
    out = []
    for old, new in RENAMED.get(runner, {}).items():
        section, _, key = old.rpartition(".")
        node: Any = cfg
        for part in section.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and key in node:
            out.append(f"{old}: renamed to {new} (one name for how many a run keeps, in every method and in eval.py)")
    return out


def _open(root: type, loc: tuple[Any, ...]) -> bool:
    """Whether the unknown key at ``loc`` is under a class whose other keys are someone else's."""
    owner = dataclass_in(_locate(root, loc[:-1]).hint) if len(loc) > 1 else root
    return bool(getattr(owner, "OPEN", False))


def _unknown_line(loc: tuple[Any, ...], root: type, cfg: Mapping[str, Any], recipe: Recipe, runner: str) -> str:
    """``key: not a X option (file); did you mean ...?`` for a key the recipe lacks."""
    if len(loc) == 1:
        close = difflib.get_close_matches(str(loc[0]), sorted(fields_of(root)), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"{loc[0]}: not an option of runner {runner} ({recipe.file}){hint}"
    spot = _locate(root, loc[:-1])
    owner = dataclass_in(spot.hint) or root  # the dataclass the unknown key is under
    key = f"{spot.key}.{loc[-1]}"
    section = dataclass_in(fields_of(root)[loc[0]][0])
    hint = _closest(key, sorted(fields_of(owner)), section)
    return f"{key}: not a {owner.__name__} option ({_file(key, cfg, recipe)}){hint}"


def option_errors(cfg: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """``(unknown keys, wrong values)`` of a composed config (a plain mapping, without ``hydra``),
    each a line naming the key, what it should be and the file that defines it."""
    runner = runner_name(cfg.get("runner"))
    recipe = RECIPES.get(runner)
    root = _root(runner if recipe is not None else None, _sections(cfg, recipe))
    errors = validation_errors(root, cfg)
    renamed, top, unknown = _renamed(cfg, runner), list[str](), list[str]()
    wrong: dict[str, tuple[_Spot, tuple[Any, ...], set[str]]] = {}
    for err in errors:
        loc = tuple(err["loc"])
        if err["type"] == UNKNOWN_KEY:
            if _open(root, loc):
                continue
            if recipe is not None and ".".join(map(str, loc)) not in RENAMED.get(runner, {}):
                (top if len(loc) == 1 else unknown).append(_unknown_line(loc, root, cfg, recipe, runner))
        elif not unset(err["input"]):
            spot = _locate(root, loc)
            wrong.setdefault(spot.key, (spot, loc[: spot.depth], set()))[2].add(err["type"])
    values = []
    for key, (spot, at, kinds) in wrong.items():
        shown = _at(cfg, at)
        what = _range(spot.meta, spot.hint) if kinds <= RANGE_ERRORS else expected(spot.hint)
        values.append(f"{key}={'null' if shown is None else shown}: expected {what} ({_file(key, cfg, recipe)})")
    return renamed + top + unknown, values


def _plain(cfg: Any) -> dict[str, Any]:
    plain = as_dict(cfg, resolve=False) if isinstance(cfg, DictConfig) else dict(cfg)
    plain.pop("hydra", None)
    return plain


def recipe_errors(cfg: Mapping[str, Any]) -> list[str]:
    """Every unknown key of the composed config ``cfg`` (a plain mapping) under its runner's recipe."""
    return option_errors(_plain(cfg))[0]


def value_errors(cfg: Mapping[str, Any]) -> list[str]:
    """Every value of the composed config whose type or range its recipe refuses, with its file."""
    return option_errors(_plain(cfg))[1]


def config_errors(cfg: Any) -> list[str]:
    """The mistakes of a composed config (a DictConfig or a plain mapping), one line each: a model of
    another family alone, else every unknown key, else every wrong value; a runner that does not
    exist is the one mistake named."""
    plain = _plain(cfg)
    runner = runner_error(plain.get("runner"))
    if runner is not None:
        return [runner]
    family = model_family_error(plain)
    if family is not None:
        return [family]
    unknown, values = option_errors(plain)
    return unknown or values


def check_recipe(cfg: Any) -> None:
    """Raise one `RecipeError` naming every mistake of a composed config: one line for one
    mistake (the key, what it should be, the file, the closest option), a list for several."""
    errors = config_errors(cfg)
    if len(errors) == 1:
        raise RecipeError(errors[0])
    if errors:
        title = "invalid options" if all("=" in e.split(":", 1)[0] for e in errors) else "unknown options"
        raise RecipeError(f"{title}:\n  " + "\n  ".join(errors))
