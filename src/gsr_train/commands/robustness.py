"""``gsr-train robustness [+experiment=robustness_webqsp_mini] [overrides]``: the robustness study
outside ``train.py`` (the same Hydra config and run folder; the webqsp_mini study by default)."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from gsr_train.config import project_root, register_resolvers
from gsr_train.options.command_line import run_hydra
from gsr_train.runs.experiment import report_user_errors, run_experiment


def main() -> None:
    register_resolvers()

    @hydra.main(version_base="1.3", config_path=str(project_root() / "conf"), config_name="config")
    def _main(cfg: DictConfig):
        return report_user_errors(run_experiment, cfg)

    if not any(a.startswith("+experiment=") for a in sys.argv[1:]):
        sys.argv.insert(1, "+experiment=robustness_webqsp_mini")
    run_hydra(_main, project_root() / "conf", "config")


if __name__ == "__main__":
    main()
