"""``gsr-train robustness [+experiment=robustness_webqsp_mini] [overrides]``: the robustness study
outside ``train.py`` (the same Hydra config and run folder; the webqsp_mini study by default)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from gsr_train.config import register_resolvers
from gsr_train.options.command_line import run_hydra_app
from gsr_train.runs.experiment import report_user_errors, run_experiment

DEFAULT_EXPERIMENT = "robustness_webqsp_mini"


def task(cfg: DictConfig) -> Any:
    return report_user_errors(run_experiment, cfg)


def main(argv: Sequence[str] | None = None, *, config: str = "config") -> Any:
    """Hydra overrides of conf/``config``.yaml; ``+experiment=`` defaults to `DEFAULT_EXPERIMENT`."""
    register_resolvers()
    given = list(sys.argv[1:] if argv is None else argv)
    if not any(a.startswith("+experiment=") for a in given):
        given = [f"+experiment={DEFAULT_EXPERIMENT}", *given]
    return run_hydra_app(task, config, given)


if __name__ == "__main__":
    main()
