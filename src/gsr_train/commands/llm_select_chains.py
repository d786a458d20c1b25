"""LLM-selected relation chains: the model picks the relevant shortest-path chains per question.

    gsr-train llm-select-chains input=../shared/data/webqsp_paths/train.jsonl.gz limit=30
    gsr-train llm-select-chains data.dir=rmanluo/RoG-webqsp split=train llm=openai llm.model=gpt-4o

Hydra app (config: conf/prep/llm_select_chains.yaml; the endpoint: conf/llm/*.yaml). Writes
JSONL rows with `selected` / `llm_paths` (gpt_paths layout) and a `.summary.json` next to them.
Resumable: answers are cached per request, so a killed run restarts where it stopped.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from gsr_train.commands import run_llm_step
from gsr_train.config import register_resolvers
from gsr_train.options.command_line import run_hydra_app

CONFIG = "prep/llm_select_chains"


def task(cfg: DictConfig) -> None:
    run_llm_step("select_chains", cfg)


def main(argv: Sequence[str] | None = None) -> Any:
    """``gsr-train llm-select-chains [key=value ...]``: Hydra overrides of conf/prep/llm_select_chains.yaml;
    a mistake in them is one line and exit 2 (:func:`gsr_train.options.command_line.run_hydra`)."""
    register_resolvers()
    return run_hydra_app(task, CONFIG, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
