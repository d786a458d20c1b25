"""The text of ``python train.py --help`` (``hydra.help.template``): how to run, the config groups, and
the experiments, or the options of the one picked (the option classes import no torch: either answers
in well under a second)."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from gsr_train.config import project_root
from gsr_train.options.describe import describe


def experiments() -> list[str]:
    """The experiments of conf/experiment (the ``*_defaults`` files are their starting points)."""
    folder = project_root() / "conf" / "experiment"
    return sorted(p.stem for p in folder.glob("*.yaml") if not p.stem.endswith("_defaults"))


def help_template(root: DictConfig) -> str:
    """``hydra.help.template``: how to run, the config groups, the options of the experiment picked."""
    choices = OmegaConf.select(root, "hydra.runtime.choices", default={}) or {}
    job = str(OmegaConf.select(root, "hydra.job.name", default="train"))
    app = f"python {job}.py" if job in ("train", "eval") else f"gsr-train {job}"  # the command typed
    lines = [
        f"usage: {app} +experiment=NAME [key=value ...]: a run (Hydra; --hydra-help for Hydra's own help,",
        "--cfg job for the composed config). gsr-train options NAME prints the options of any experiment.",
        "",
        "== Config groups (group=option) ==",
        "$APP_CONFIG_GROUPS",
        "",
    ]
    if choices.get("experiment") is None:
        lines += ["== Experiments (+experiment=NAME; add --help for its options) ==", ", ".join(experiments())]
    else:
        lines += [f"== Options of +experiment={choices['experiment']} ==", describe(root).replace("$", "$$")]
    return "\n".join(lines) + "\n"
