"""Open-ended questions (OKGQA categories) about the topic entities of each graph, written by an LLM.

    gsr-train llm-open-questions data.dir=../shared/data/webqsp_mini split=test limit=20
    gsr-train llm-open-questions data.dir=rmanluo/RoG-webqsp per_graph=5 llm=openai

Hydra app (config: conf/prep/llm_open_questions.yaml; the endpoint: conf/llm/*.yaml). Writes
OpenQuestion rows `{"id", "graph_id", "question", "type", "entities", ..., "raw_response"}`
(read by gsr_train.data.open_questions.read_questions), a `.responses.jsonl.gz` and a
`.summary.json`. Resumable.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from gsr_train.commands import run_llm_step
from gsr_train.config import register_resolvers
from gsr_train.options.command_line import run_hydra_app

CONFIG = "prep/llm_open_questions"


def task(cfg: DictConfig) -> None:
    run_llm_step("open_questions", cfg)


def main(argv: Sequence[str] | None = None) -> Any:
    """``gsr-train llm-open-questions [key=value ...]``: Hydra overrides of conf/prep/llm_open_questions.yaml;
    a mistake in them is one line and exit 2 (:func:`gsr_train.options.command_line.run_hydra`)."""
    register_resolvers()
    return run_hydra_app(task, CONFIG, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
