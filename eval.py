"""Hydra entry point: ``python eval.py ckpt_path=RUN_OR_CHECKPOINT data.dir=FOLDER [split=test] [top_k=K]``.

Scores a trained run (SubgraphRAG, GSR, a LoRA / QLoRA reader) or an untrained retriever
(``+experiment=cosine_baseline``, ``classic_*``, ``simgrag``, ``safe``) on any data, into a
new run folder with the same results and metrics files as a training run (see
:mod:`gsr_train.runs.evaluate_run`).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from gsr_train.config import register_resolvers

register_resolvers()


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
def main(cfg: DictConfig):
    from gsr_train.runs.evaluate_run import run
    from gsr_train.runs.experiment import report_user_errors

    return report_user_errors(run, cfg)


if __name__ == "__main__":
    main()
