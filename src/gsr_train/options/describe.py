"""Options printed and written from their dataclasses, the one source of their defaults.

* `describe`: every option of a composed config's runner, its value (and default when they
  differ), its type and range, its one-line description (``gsr-train options NAME``, and
  ``python train.py +experiment=NAME --help`` through `gsr_train.options.help.help_template`);
* `DEFAULTS_FILES` and `render`: the ``conf/recipes/*_defaults.yaml`` files every
  experiment of a runner starts from, generated from the dataclasses with each description as a
  comment (``gsr-train options --write_defaults`` writes them; a test keeps them current).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from gsr_train.config import project_root
from gsr_train.options.check import (
    dataclass_in,
    family_models,
    fields_of,
    item_class,
    section_file,
    type_text,
    unset,
)
from gsr_train.options.recipes import COMMON, RECIPES, RENAMED, DataOptions, Recipe, runner_name


def show(value: Any) -> str:
    """A value as it is written in YAML and on the command line: ``null``, ``true``, ``[a, b]``."""
    plain = dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value
    if isinstance(plain, tuple):
        plain = list(plain)
    text = yaml.safe_dump(plain, default_flow_style=True, width=10**6, sort_keys=False).strip()
    return text.removesuffix("...").strip()


def _default(cls: type, name: str) -> Any:
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value


def _same(a: Any, b: Any) -> bool:
    norm = lambda v: list(v) if isinstance(v, tuple) else v  # noqa: E731
    return norm(a) == norm(b)


@dataclass(frozen=True)
class Row:
    key: str
    value: str  # empty for a section of sections
    kind: str
    description: str


def rows(cls: type, prefix: str, node: Any, keys: tuple[str, ...] | None = None) -> Iterator[Row]:
    """One row per option of ``cls`` (and of the dataclasses inside it), valued from ``node``."""
    node = node if isinstance(node, Mapping) else {}
    for name, (hint, meta) in fields_of(cls).items():
        if keys is not None and name not in keys:
            continue
        key, about = f"{prefix}.{name}" if prefix else name, str(meta.get("description", ""))
        default = _default(cls, name)
        value = node.get(name, default)
        if (inner := dataclass_in(hint)) is not None:
            yield Row(key, "", "", about)
            yield from rows(inner, key, value)
            continue
        shown = show(value) + ("" if unset(value) or _same(value, default) else f"  (default {show(default)})")
        yield Row(key, shown, type_text(hint, meta), about)
        if (item := item_class(hint)) is not None:
            yield from rows(item, f"{key}[]", {})


def _table(title: str, lines: list[Row]) -> list[str]:
    width = min(48, max((len(r.key) + len(r.value) + 3 for r in lines), default=0))
    kinds = min(34, max((len(r.kind) for r in lines), default=0))
    out = [title]
    for r in lines:
        if not r.value and not r.kind:
            out.append(f"  {r.key}: {r.description}")
            continue
        left = f"{r.key} = {r.value}"
        out.append(f"  {left:<{width}}  {r.kind:<{kinds}}  {r.description}".rstrip())
    return out


def describe(cfg: Any, experiment: str | None = None) -> str:
    """Every option of a composed config's runner (a DictConfig, with or without ``hydra``)."""
    plain = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else dict(cfg)
    assert isinstance(plain, dict)
    choices = dict((plain.get("hydra") or {}).get("runtime", {}).get("choices", {}) or {})
    runner = runner_name(plain.get("runner"))
    recipe = RECIPES.get(runner)
    name = experiment or choices.get("experiment") or plain.get("experiment_name")
    head = f"+experiment={name}: runner {runner}." if name else f"runner {runner}."
    if recipe is None:
        return f"{head} It has no typed recipe (gsr_train.options.recipes): its options are its own."
    out = [
        f"{head} Set an option with key=value (+key=value for a key the config lacks);",
        "every option is checked before any work, a mistake is one line and exit status 2.",
        "",
    ]
    typed = fields_of(recipe.top)
    top = tuple(k for k in (*COMMON, *recipe.top_level) if k in typed and k in plain)
    out += _table(f"top-level keys (conf/config.yaml, {recipe.file})", list(rows(recipe.top, "", plain, top)))
    data = f"conf/data/{choices['data']}.yaml" if "data" in choices else "conf/data/"
    out += _table(
        f"data ({data}; its other keys are the dataset's own)", list(rows(DataOptions, "data", plain.get("data")))
    )
    for section, pick in recipe.sections.items():
        node = plain.get(section)
        if node is None:
            continue
        cls = pick if isinstance(pick, type) else pick(node if isinstance(node, Mapping) else {})
        where = section_file(section, node, recipe)
        if section == "model" and recipe.families:
            where += f"; model={' | '.join(family_models(recipe.families))}"
        out += _table(f"{section} ({where})", list(rows(cls, section, node)))
    groups = [f"{g}={c}" for g, c in choices.items() if not g.startswith("hydra") and g != "experiment" and c]
    if groups:
        out += [
            "",
            f"config groups (group=option, each a file in conf/<group>/; Hydra checks their keys): {', '.join(groups)}",
        ]
    return "\n".join(out)


# ------------------------------------------------------------------ the *_defaults.yaml files
@dataclass(frozen=True)
class DefaultsFile:
    """A ``*_defaults.yaml`` file: a runner's top-level keys and sections with their defaults."""

    path: str
    runner: str
    about: str  # its first comment lines
    top: tuple[str, ...]
    sections: tuple[str, ...]
    before: str = ""  # literal YAML before the runner (a defaults list)
    after: str = ""  # literal YAML after the top-level keys (settings that follow an option)


DEFAULTS_FILES = (
    DefaultsFile(
        "conf/recipes/subgraphrag_defaults.yaml",
        "subgraphrag",
        "Shared SubgraphRAG settings; every subgraphrag_* experiment starts from these\n"
        "(see src/gsr_train/runs/subgraphrag.py). Architecture and training recipe: model=...",
        ("top_k",),
        ("subgraphrag",),
        after="trainer:\n  max_epochs: ${model.train.epochs}  # one setting: change model.train.epochs\n",
    ),
    DefaultsFile(
        "conf/recipes/gsr_defaults.yaml",
        "gsr",
        "Shared GSR settings; every gsr_* experiment starts from these (see src/gsr_train/runs/gsr.py).",
        ("top_k",),
        ("gsr",),
        after="trainer:\n  max_epochs: ${model.epochs}  # one setting: change model.epochs\n",
    ),
    DefaultsFile(
        "conf/recipes/reader_defaults.yaml",
        "reader",
        "Shared reader settings (src/gsr_train/runs/reader.py): retrieve -> read -> score.",
        ("top_k",),
        ("qa",),
        after="trainer:\n  max_epochs: ${qa.train.epochs}  # one setting: change qa.train.epochs\n",
    ),
    DefaultsFile(
        "conf/recipes/classic_defaults.yaml",
        "classic",
        "Shared settings of the classic (untrained) retrievers: OKGQA / G-Retriever prizes from the\n"
        "frozen encoder, then top-k triplets, greedy prize-cost paths or a PCST subgraph.\n"
        "  python train.py +experiment=classic_pcst data=webqsp_mini",
        ("split", "top_k"),
        ("classic",),
    ),
    DefaultsFile(
        "conf/recipes/okgqa_defaults.yaml",
        "open_ended",
        "Shared settings of OKGQA's open-ended evaluation (src/gsr_train/runs/open_ended.py): the\n"
        "questions, the retrieval forms read, the judges (the LLM endpoint: llm=...; the frozen encoder).",
        ("split", "top_k"),
        ("open_ended",),
        before="defaults:\n"
        "  - classic_defaults  # the classic retrievers behind the forms (triplets, paths, subgraphs = pcst)\n"
        "  - /llm: local\n  - override /data: webqsp_mini\n  - override /encoder: minilm\n  - _self_\n",
    ),
)


def _yaml_rows(cls: type, node: Mapping[str, Any], indent: str, skip: set[str], prefix: str) -> list[tuple[str, str]]:
    """(``key: value`` line, its comment) per option of ``cls``; a dataclass section nests."""
    out: list[tuple[str, str]] = []
    for name, (hint, meta) in fields_of(cls).items():
        key = f"{prefix}.{name}" if prefix else name
        if key in skip:
            continue
        about = str(meta.get("description", ""))
        if (inner := dataclass_in(hint)) is not None:
            out.append((f"{indent}{name}:", about))
            out += _yaml_rows(inner, node.get(name) or {}, indent + "  ", skip, key)
        else:
            out.append((f"{indent}{name}: {show(node.get(name))}", about))
    return out


def render(spec: DefaultsFile) -> str:
    """The text of a defaults file, from the runner's recipe."""
    recipe: Recipe = RECIPES[spec.runner]
    lines = [
        "# @package _global_",
        *(f"# {line}" if line else "#" for line in spec.about.splitlines()),
        "# Generated from the option dataclasses (src/gsr_train/options/recipes.py and the classes it names):",
        "# edit those, then `gsr-train options --write_defaults`; `gsr-train options NAME` prints them.",
    ]
    text = "\n".join(lines) + "\n" + spec.before + f"runner: {spec.runner}\n"
    top = [row for row in _yaml_rows(recipe.top, dataclasses.asdict(recipe.top()), "", set(), "")]
    text += _block([row for row in top if row[0].split(":", 1)[0] in spec.top]) + spec.after
    for section in spec.sections:
        cls = recipe.sections[section]
        assert isinstance(cls, type), f"{spec.path}: section {section} has no one dataclass"
        renamed = {k.split(".", 1)[1] for k in RENAMED.get(spec.runner, {}) if k.startswith(section + ".")}
        text += f"{section}:\n" + _block(_yaml_rows(cls, dataclasses.asdict(cls()), "  ", renamed, ""))
    return text


def _block(pairs: list[tuple[str, str]]) -> str:
    """Lines with their comments aligned (long lines keep one space before the ``#``)."""
    width = min(40, max((len(line) for line, _ in pairs), default=0))
    return "".join(f"{line:<{width}}  # {about}\n" if about else f"{line}\n" for line, about in pairs)


def write_defaults(root: Path | None = None) -> list[str]:
    """Write every defaults file that differs from its dataclasses; the paths written."""
    root = root or project_root()
    written = []
    for spec in DEFAULTS_FILES:
        path, text = root / spec.path, render(spec)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(spec.path)
    return written
