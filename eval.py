"""Hydra entry point: ``python eval.py ckpt_path=RUN_OR_CHECKPOINT data.dir=FOLDER [split=test] [top_k=K]``.

Scores a trained run (SubgraphRAG, GSR, a LoRA / QLoRA reader) or an untrained retriever
(``+experiment=cosine_baseline``, ``classic_*``, ``simgrag``, ``safe``) on any data, into a
new run folder with the same results and metrics files as a training run (see
:mod:`gsr_train.runs.evaluate_run`). A config mistake, Hydra's included, is one line and exit
status 2 (:mod:`gsr_train.options`).
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from gsr_train.config import register_resolvers
from gsr_train.options.command_line import run_hydra

register_resolvers()


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
def main(cfg: DictConfig):
    from gsr_train.runs.evaluate_run import run
    from gsr_train.runs.experiment import report_user_errors

    return report_user_errors(run, cfg)


if __name__ == "__main__":
    run_hydra(main, Path(__file__).resolve().parent / "conf", "eval")
