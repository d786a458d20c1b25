"""``docs/reference/options.md``: every option of every experiment, generated from the option
dataclasses (``gsr-train options --write_docs`` writes it; a test keeps it current).

One section per runner (the experiments that share its recipe): a table per section of the
config (key | type | default | range | description, the defaults those of the dataclasses),
then per experiment the config groups it picks and the options it sets to another value.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from gsr_train.config import project_root
from gsr_train.io import atomic_write
from gsr_train.options.check import bounds, dataclass_in, expected, fields_of, item_class, unset
from gsr_train.options.command_line import compose_config
from gsr_train.options.describe import _default, show
from gsr_train.options.help import experiments
from gsr_train.options.recipes import (
    COMMON,
    MODEL_FAMILIES,
    RECIPES,
    DataOptions,
    GSRRetrieverSpec,
    Recipe,
    RetrieverSpec,
    model_options,
    retriever_spec,
    runner_name,
)

PAGE = "docs/reference/options.md"


@dataclass(frozen=True)
class DocRow:
    """One option as the page lists it."""

    key: str
    kind: str  # its type in words ("" for a section of sections)
    default: str
    range: str
    description: str


def _kind(hint: Any) -> str:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (expected(rest[0]) if len(rest) == 1 else " or ".join(expected(a) for a in rest)) + " or null"
    return expected(hint)


def doc_rows(cls: type, prefix: str, keys: tuple[str, ...] | None = None) -> Iterator[DocRow]:
    """One row per option of ``cls`` (and of the dataclasses in it), with the dataclass defaults."""
    for name, (hint, meta) in fields_of(cls).items():
        if keys is not None and name not in keys:
            continue
        key, about = f"{prefix}.{name}" if prefix else name, str(meta.get("description", ""))
        if (inner := dataclass_in(hint)) is not None:
            yield DocRow(key, "section", "", "", about)
            yield from doc_rows(inner, key)
            continue
        span = "non-empty" if meta.get("min_length") else bounds(meta)
        yield DocRow(key, _kind(hint), show(_default(cls, name)), span, about)
        if (item := item_class(hint)) is not None:
            yield from doc_rows(item, f"{key}[]")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{_cell(text)}`" if text else ""


def table(lines: list[DocRow]) -> list[str]:
    """A Markdown table of options."""
    out = ["| key | type | default | range | description |", "|---|---|---|---|---|"]
    for r in lines:
        out.append(
            f"| {_code(r.key)} | {_cell(r.kind)} | {_code(r.default)} | {_cell(r.range)} | {_cell(r.description)} |"
        )
    return [*out, ""]


def _candidates(recipe: Recipe, section: str) -> list[tuple[str, type]]:
    """The dataclasses a section may take: one, or those a picker chooses among."""
    pick = recipe.sections[section]
    if isinstance(pick, type):
        return [("", pick)]
    if pick is model_options:
        if recipe.families:
            return [(f"model.family={f}", MODEL_FAMILIES[f]) for f in recipe.families]
        # a runner that trains no model of its own reads one for retriever=gsr (conf/retriever/gsr.yaml)
        return [(f"retriever=gsr, model.family={f}", MODEL_FAMILIES[f]) for f in RECIPES["gsr"].families]
    if pick is retriever_spec:
        return [("any retriever", RetrieverSpec), ("retriever=gsr", GSRRetrieverSpec)]
    raise TypeError(f"{section}: a section picker the reference page does not know ({pick})")


def _runners() -> dict[str, list[str]]:
    """Runner -> the runners sharing its recipe (open_ended, judge_calibration, ...)."""
    groups: dict[int, list[str]] = {}
    for name, recipe in RECIPES.items():
        groups.setdefault(id(recipe), []).append(name)
    return {names[0]: names for names in groups.values()}


def _common_section() -> list[str]:
    top = tuple(k for k in COMMON if k in fields_of(RECIPES["subgraphrag"].top))
    common = [r for r in doc_rows(RECIPES["subgraphrag"].top, "", top) if r.key not in ("top_k", "split")]
    return [
        "## Every experiment",
        "",
        "Top-level keys of `conf/config.yaml` that every runner reads (each runner's own `top_k`, `split` and",
        "other top-level keys are in its section below), and the `data` keys typed for every dataset",
        "(a dataset file in `conf/data/` has keys of its own).",
        "",
        *table(common),
        *table(list(doc_rows(DataOptions, "data"))),
    ]


def _runner_section(names: list[str], recipe: Recipe, members: list[str]) -> list[str]:
    out = [f"## {' / '.join(f'`{n}`' for n in names)}", ""]
    out += [f"Recipe file `{recipe.file}`; experiments: {', '.join(f'`{m}`' for m in members) or 'none'}.", ""]
    own = tuple(k for k in recipe.top_level if k in fields_of(recipe.top))
    out += ["**Top-level keys**", "", *table(list(doc_rows(recipe.top, "", own)))]
    for section in recipe.sections:
        for label, cls in _candidates(recipe, section):
            head = f"**`{section}`**" + (f" ({label})" if label else "")
            out += [head, "", *table(list(doc_rows(cls, section)))]
    return out


def _differences(cls: type, prefix: str, node: Any) -> Iterator[tuple[str, str, str]]:
    """(key, value, default) of every option ``node`` sets to another value than ``cls``'s default."""
    node = node if isinstance(node, Mapping) else {}
    for name, (hint, _) in fields_of(cls).items():
        if name not in node:
            continue
        key, default, value = f"{prefix}.{name}" if prefix else name, _default(cls, name), node[name]
        if (inner := dataclass_in(hint)) is not None:
            yield from _differences(inner, key, value)
        elif show(value) != show(default) and not (unset(value) and unset(default)):
            yield key, show(value), show(default)


def _section_class(recipe: Recipe, section: str, node: Any) -> type:
    pick = recipe.sections[section]
    return pick if isinstance(pick, type) else pick(node if isinstance(node, Mapping) else {})


def experiment_overrides(name: str) -> tuple[str, list[str], list[tuple[str, str, str]]]:
    """An experiment's runner, the config groups it picks and the options it sets (key, value, default)."""
    cfg = compose_config(project_root() / "conf", "config", [f"+experiment={name}"])
    plain = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(plain, dict)
    choices = plain.pop("hydra", {}).get("runtime", {}).get("choices", {}) or {}
    groups = [f"{g}={c}" for g, c in choices.items() if not g.startswith("hydra") and g != "experiment" and c]
    runner = runner_name(plain.get("runner"))
    recipe = RECIPES.get(runner)
    if recipe is None:
        return runner, groups, []
    changed = list(_differences(recipe.top, "", {k: v for k, v in plain.items() if k not in recipe.sections}))
    changed += _differences(DataOptions, "data", plain.get("data"))
    for section in recipe.sections:
        if plain.get(section) is not None:
            changed += _differences(_section_class(recipe, section, plain[section]), section, plain[section])
    return runner, groups, changed


def _experiment_lines(name: str, groups: list[str], changed: list[tuple[str, str, str]]) -> list[str]:
    out = [f"### `{name}`", "", f"`python train.py +experiment={name}`; config groups: {_code(' '.join(groups))}.", ""]
    if not changed:
        return [*out, "Every option at its default.", ""]
    out += ["| key | value | default |", "|---|---|---|"]
    out += [f"| {_code(k)} | {_code(v)} | {_code(d)} |" for k, v, d in changed]
    return [*out, ""]


def render_page() -> str:
    """The text of docs/reference/options.md."""
    runs = {name: experiment_overrides(name) for name in experiments()}
    out = [
        "# Options of every experiment",
        "",
        "<!-- generated by `gsr-train options --write_docs` from src/gsr_train/options/recipes.py",
        "     and the dataclasses it names: edit those, not this page -->",
        "",
        "Every option a run reads, with its type, default, range and description, generated from the option",
        "dataclasses (`src/gsr_train/options/recipes.py`), the one source of the defaults. Set one with",
        "`key=value` on `python train.py +experiment=NAME`; a value out of range or an unknown key is one line",
        "and exit status 2 before any work. `gsr-train options NAME [key=value ...]` prints the values one",
        "experiment composes to.",
        "",
        *_common_section(),
    ]
    for first, names in _runners().items():
        members = [n for n, (runner, _, _) in runs.items() if runner in names]
        out += _runner_section(names, RECIPES[first], members)
        for member in members:
            out += _experiment_lines(member, runs[member][1], runs[member][2])
    untyped = [n for n, (runner, _, _) in runs.items() if runner not in RECIPES]
    if untyped:
        out += ["## Experiments without a typed recipe", "", ", ".join(f"`{n}`" for n in untyped), ""]
    return "\n".join(out).rstrip() + "\n"


def write_page(path: str | Path | None = None) -> bool:
    """Write the options page when it differs; whether it was written."""
    target = Path(path) if path else project_root() / PAGE
    text = render_page()
    if target.exists() and target.read_text() == text:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(target) as fh:
        fh.write(text)
    return True
