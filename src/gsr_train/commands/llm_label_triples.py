"""Relevance labels: up to 20 relevant triples per question chosen by an LLM among candidates.

    gsr-train llm-label-triples data.dir=../shared/data/webqsp_mini split=test limit=20
    gsr-train llm-label-triples data.dir=rmanluo/RoG-webqsp retrieval=path/to/results_test.jsonl llm=openai

Hydra app (config: conf/prep/llm_label_triples.yaml; the endpoint: conf/llm/*.yaml). Writes
`{"id", "triples", "raw_response"}` rows (the gpt_triples format read by labelled-triple
recall) and a `.summary.json`. Resumable.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from gsr_train.commands import run_llm_step
from gsr_train.config import register_resolvers
from gsr_train.options.command_line import run_hydra_app

CONFIG = "prep/llm_label_triples"


def task(cfg: DictConfig) -> None:
    run_llm_step("label_triples", cfg)


def main(argv: Sequence[str] | None = None) -> Any:
    """``gsr-train llm-label-triples [key=value ...]``: Hydra overrides of conf/prep/llm_label_triples.yaml;
    a mistake in them is one line and exit 2 (:func:`gsr_train.options.command_line.run_hydra`)."""
    register_resolvers()
    return run_hydra_app(task, CONFIG, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
