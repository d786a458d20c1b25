"""``gsr-train llm-label-triples | llm-pseudo-questions | llm-select-chains | llm-open-questions``: the
four LLM data steps, one entry. Each is a Hydra app on ``conf/prep/llm_<step>.yaml`` running
``gsr_train.llm.steps.<step>`` (whose docstring is the verb's help); a mistake in the overrides is
one line and exit 2 (`gsr_train.options.command_line.run_hydra_app`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from gsr_train.commands import run_llm_step
from gsr_train.config import register_resolvers
from gsr_train.options.command_line import run_hydra_app

PREFIX = "prep/llm_"  # conf/prep/llm_<step>.yaml configures gsr_train.llm.steps.<step>


def step_of(config: str) -> str:
    """The step a config names: ``prep/llm_label_triples`` -> ``label_triples``."""
    if not config.startswith(PREFIX):
        raise ValueError(f"{config}: not an LLM step's config (expected {PREFIX}<step>)")
    return config.removeprefix(PREFIX)


def main(argv: Sequence[str] | None = None, *, config: str) -> Any:
    """Run the step of ``config`` on the Hydra overrides ``argv`` (default: this process's arguments)."""
    step = step_of(config)

    def task(cfg: DictConfig) -> None:
        run_llm_step(step, cfg)

    register_resolvers()
    return run_hydra_app(task, config, list(sys.argv[1:] if argv is None else argv))
