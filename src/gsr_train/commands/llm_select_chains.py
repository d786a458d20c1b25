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
from gsr_train.llm.steps.select_chains import run

register_resolvers()


@hydra.main(version_base="1.3", config_path=str(project_root() / "conf"), config_name="prep/llm_select_chains")
def main(cfg: DictConfig) -> None:

    run_llm_step(run, cfg)


if __name__ == "__main__":
    main()
