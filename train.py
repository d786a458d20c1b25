"""Hydra entry point: ``python train.py +experiment=NAME [overrides]``.

It only composes the config and hands it to the experiment's runner (``cfg.runner``,
a dotted path to a function taking the config). Every runner writes its figures as JSON
into the run folder.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from gsr_train.config import register_resolvers

register_resolvers()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from gsr_train.runs.experiment import report_user_errors, run_experiment

    return report_user_errors(run_experiment, cfg)


if __name__ == "__main__":
    main()
