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
from gsr_train.llm.steps.pseudo_questions import run

register_resolvers()


@hydra.main(version_base="1.3", config_path=str(project_root() / "conf"), config_name="prep/llm_pseudo_questions")
def main(cfg: DictConfig) -> None:

    run_llm_step(run, cfg)


if __name__ == "__main__":
    main()
