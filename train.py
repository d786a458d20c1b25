"""Hydra entry point: ``python train.py +experiment=NAME [overrides]``.

It only composes the config and hands it to the experiment's runner (``cfg.runner``,
a dotted path to a function taking the config). Every runner writes its figures as JSON
into the run folder. ``python train.py --help`` lists the experiments (one line each),
``python train.py +experiment=NAME --help`` the experiment's options;
a config mistake, Hydra's included, is one line and exit status 2 (:mod:`gsr_train.options`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from gsr_train.config import register_resolvers
from gsr_train.options.command_line import run_hydra
from gsr_train.options.help import experiment_guard

register_resolvers()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from gsr_train.runs.experiment import report_user_errors, run_experiment

    return report_user_errors(run_experiment, cfg)


if __name__ == "__main__":
    # --help, or no experiment: the experiments listed, before Hydra composes anything
    if (status := experiment_guard(sys.argv[1:])) is not None:
        sys.exit(status)
    run_hydra(main, Path(__file__).resolve().parent / "conf", "config")
