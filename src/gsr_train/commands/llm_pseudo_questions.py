"""Pseudo questions: ~10 `[SUBJECT]` templates per relation, filled with real KG subjects.

    gsr-train llm-pseudo-questions data.dir=../shared/data/webqsp_mini limit=20
    gsr-train llm-pseudo-questions data.dir=rmanluo/RoG-webqsp relations=file \\
        relation_file=../shared/data/freebase_relations.txt llm=openai

Hydra app (config: conf/prep/llm_pseudo_questions.yaml; the endpoint: conf/llm/*.yaml). Writes
the questions, a `.responses.jsonl.gz` with raw answers and a `.summary.json`. Resumable.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from gsr_train.commands import run_llm_step
from gsr_train.config import register_resolvers
from gsr_train.options.command_line import run_hydra_app

CONFIG = "prep/llm_pseudo_questions"


def task(cfg: DictConfig) -> None:
    run_llm_step("pseudo_questions", cfg)


def main(argv: Sequence[str] | None = None) -> Any:
    """``gsr-train llm-pseudo-questions [key=value ...]``: Hydra overrides of conf/prep/llm_pseudo_questions.yaml;
    a mistake in them is one line and exit 2 (:func:`gsr_train.options.command_line.run_hydra`)."""
    register_resolvers()
    return run_hydra_app(task, CONFIG, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
