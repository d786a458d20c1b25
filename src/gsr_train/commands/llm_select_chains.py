"""LLM-selected relation chains: the model picks the relevant shortest-path chains per question.

    gsr-train llm-select-chains input=../shared/data/webqsp_paths/train.jsonl.gz limit=30
    gsr-train llm-select-chains data.dir=rmanluo/RoG-webqsp split=train llm=openai llm.model=gpt-4o

Hydra app (config: conf/prep/llm_select_chains.yaml; the endpoint: conf/llm/*.yaml). Writes
JSONL rows with `selected` / `llm_paths` (gpt_paths layout) and a `.summary.json` next to them.
Resumable: answers are cached per request, so a killed run restarts where it stopped.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from gsr_train.commands import run_llm_step
from gsr_train.config import project_root, register_resolvers
from gsr_train.options.command_line import run_hydra

CONFIG = "prep/llm_select_chains"


@hydra.main(version_base="1.3", config_path=str(project_root() / "conf"), config_name=CONFIG)
def _main(cfg: DictConfig) -> None:
    run_llm_step("select_chains", cfg)


def main() -> None:
    """The command line: a mistake in the options is one line and exit 2 (:func:`run_hydra`)."""
    register_resolvers()
    run_hydra(_main, project_root() / "conf", CONFIG)


if __name__ == "__main__":
    main()
