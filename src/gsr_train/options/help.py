"""The text of ``python train.py --help`` (``hydra.help.template``): how to run, the config groups, and
the experiments, or the options of the one picked (the option classes import no torch: either answers
in well under a second)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from gsr_train.config import project_root
from gsr_train.options.describe import describe


def experiments() -> list[str]:
    """The experiments: the files of conf/experiment (their starting points, the ``*_defaults``
    files, are in conf/recipes)."""
    return sorted(p.stem for p in (project_root() / "conf" / "experiment").glob("*.yaml"))


def first_comment(path: Path) -> str:
    """The first comment line of a YAML file (after ``# @package``): what the file is."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") and not line.startswith("# @package"):
            return line.lstrip("#").strip()
    return ""


def experiment_lines() -> str:
    """One line per experiment: its name and the first comment line of its file."""
    folder = project_root() / "conf" / "experiment"
    names = experiments()
    width = max(map(len, names), default=0)
    return "\n".join(f"  {n:<{width}}  {first_comment(folder / f'{n}.yaml')}".rstrip() for n in names)


def train_usage(app: str = "python train.py") -> str:
    """``python train.py --help`` without an experiment (and the refusal of a run without one)."""
    return (
        f"usage: {app} +experiment=NAME [key=value ...]   ({app} +experiment=NAME --help: its options;\n"
        "--hydra-help: Hydra's own help; gsr-train options NAME prints the options of any experiment)\n\n"
        f"experiments (conf/experiment/NAME.yaml):\n{experiment_lines()}\n"
    )


# Hydra's flags that print instead of running (no experiment needed for them)
_PRINTING = ("--hydra-help", "--version", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc")


def experiment_guard(argv: list[str], app: str = "python train.py") -> int | None:
    """Before Hydra (and any seeding or run folder): ``--help`` without an experiment prints the
    experiments and answers 0; a run without ``+experiment=`` (or a ``runner=`` of its own) prints
    one error line and the experiments and answers 2; None: go on."""
    if any(re.match(r"\+{0,2}(experiment|runner)=", a) for a in argv) or any(a in _PRINTING for a in argv):
        return None
    if "--help" in argv or "-h" in argv:
        print(train_usage(app), end="")
        return 0
    print(f"error: no experiment given: {app} +experiment=NAME [key=value ...], NAME one of", file=sys.stderr)
    print(experiment_lines(), file=sys.stderr)
    return 2


_OPTION = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w-]*):(?: +(?P<value>[^#]*?))? *(?:# *(?P<about>.*))?$")


def config_options(path: Path) -> list[tuple[str, str, str]]:
    """``(dotted key, value, comment)`` of each leaf of a Hydra config file, as written (the
    ``defaults`` list and the ``hydra`` section left out)."""
    rows: list[tuple[str, str, str]] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the sections above
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _OPTION.match(line)
        if m is None:
            continue
        indent, key, value = len(m["indent"]), m["key"], (m["value"] or "").strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([*(k for _, k in stack), key])
        if not value:
            stack.append((indent, key))
        elif dotted.split(".")[0] not in ("defaults", "hydra"):
            rows.append((dotted, value, (m["about"] or "").strip()))
    return rows


def hydra_verb_help(app: str, doc: str, config: str) -> str:
    """The ``--help`` of a Hydra verb (``gsr-train llm-*``): what it does and its options with their
    values and comments, read from its config file (no Hydra, no torch). A verb on the experiments'
    config (``config``: ``gsr-train robustness``) names where its experiment's options are."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", doc)  # :mod:`x` / :func:`~x.y` read as x / x.y
    text = re.sub(r"`+", "", text).strip()
    lines = [f"Usage: {app} [KEY=VALUE ...]", "", *("  " + x if x else "" for x in text.splitlines()), ""]
    if config == "config":
        lines += [
            "Options: those of its experiment, as train.py takes them (+experiment=NAME, key=value);",
            "gsr-train options NAME prints them all with their types and descriptions.",
        ]
    else:
        rows = config_options(project_root() / "conf" / f"{config}.yaml")
        width = min(40, max((len(k) + len(v) + 3 for k, v, _ in rows), default=0))
        lines += [f"Options (KEY=VALUE, as in conf/{config}.yaml; llm=local|openai|ollama|vllm picks the endpoint):"]
        lines += [f"  {f'{k} = {v}':<{width}}  {about}".rstrip() for k, v, about in rows]
    lines += ["", "  -h, --help: this help; --hydra-help: Hydra's own; --cfg job: the composed config"]
    return "\n".join(lines)


def help_template(root: DictConfig) -> str:
    """``hydra.help.template``: how to run, the config groups, the options of the experiment picked."""
    choices = OmegaConf.select(root, "hydra.runtime.choices", default={}) or {}
    job = str(OmegaConf.select(root, "hydra.job.name", default="train"))
    app = f"python {job}.py" if job in ("train", "eval") else f"gsr-train {job}"  # the command typed
    usage = [f"usage: {app} +experiment=NAME [key=value ...]: a run (Hydra; --hydra-help for Hydra's own help,"]
    if job == "eval":  # eval.py scores a run first of all: its ckpt_path leads
        usage = [
            "usage: python eval.py ckpt_path=RUN_FOLDER_OR_CHECKPOINT [data.dir=FOLDER] [split=test] [top_k=K]: a",
            "trained run (a run folder, a .ckpt, a GSR model/ or reader adapter/ folder) scored on any data, or",
            "python eval.py +experiment=NAME data.dir=FOLDER: an untrained retriever (Hydra; --hydra-help for "
            "Hydra's own help,",
        ]
    lines = [
        *usage,
        "--cfg job for the composed config). gsr-train options NAME prints the options of any experiment.",
        "",
        "== Config groups (group=option) ==",
        "$APP_CONFIG_GROUPS",
        "",
    ]
    if choices.get("experiment") is None:
        lines += ["== Experiments (+experiment=NAME; add --help for its options) ==", experiment_lines()]
    else:
        lines += [f"== Options of +experiment={choices['experiment']} ==", describe(root).replace("$", "$$")]
    return "\n".join(lines) + "\n"
