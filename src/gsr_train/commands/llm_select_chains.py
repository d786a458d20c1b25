"""LLM-selected relation chains: the model picks the relevant shortest-path chains per question.

    gsr-train llm-select-chains input=../shared/data/webqsp_paths/train.jsonl.gz limit=30
    gsr-train llm-select-chains dataset=rmanluo/RoG-webqsp split=train llm=openai llm.model=gpt-4o

Hydra app (config: conf/prep/llm_select_chains.yaml; the endpoint: conf/llm/*.yaml). Writes
JSONL rows with `selected` / `llm_paths` (gpt_paths layout) and a `.summary.json` next to them.
Resumable: answers are cached per request, so a killed run restarts where it stopped.
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from gsr_train.config import project_root, register_resolvers

register_resolvers()


@hydra.main(version_base="1.3", config_path=str(project_root() / "conf"), config_name="prep/llm_select_chains")
def main(cfg: DictConfig) -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    from gsr_train.data.errors import report_user_errors
    from gsr_train.llm.client import LLMRequestError
    from gsr_train.llm.steps.select_chains import run

    # a wrong option or input file (the steps raise ValueError / FileNotFoundError naming it), bad rows,
    # an unreachable endpoint or an unwritable cache: one ``error: ...`` line and exit 2, as in train.py
    report_user_errors(
        run,
        cfg,
        extra=(ValueError, FileNotFoundError, LLMRequestError),
        cache_dirs=[cfg.get("paths", {}).get("cache_dir")],
    )


if __name__ == "__main__":
    main()
