"""Pseudo questions: ~10 `[SUBJECT]` templates per relation, filled with real KG subjects.

    gsr-train llm-pseudo-questions data.dir=../shared/data/webqsp_mini limit=20
    gsr-train llm-pseudo-questions data.dir=rmanluo/RoG-webqsp relations=file \\
        relation_file=../shared/data/freebase_relations.txt llm=openai

Hydra app (config: conf/prep/llm_pseudo_questions.yaml; the endpoint: conf/llm/*.yaml). Writes
the questions, a `.responses.jsonl.gz` with raw answers and a `.summary.json`. Resumable.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from gsr_train.commands import run_llm_step
from gsr_train.config import project_root, register_resolvers
from gsr_train.options.command_line import run_hydra

CONFIG = "prep/llm_pseudo_questions"


@hydra.main(version_base="1.3", config_path=str(project_root() / "conf"), config_name=CONFIG)
def _main(cfg: DictConfig) -> None:
    run_llm_step("pseudo_questions", cfg)


def main() -> None:
    """The command line: a mistake in the options is one line and exit 2 (:func:`run_hydra`)."""
    register_resolvers()
    run_hydra(_main, project_root() / "conf", CONFIG)


if __name__ == "__main__":
    main()
