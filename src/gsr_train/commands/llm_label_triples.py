"""Relevance labels: up to 20 relevant triples per question chosen by an LLM among candidates.

    gsr-train llm-label-triples data.dir=../shared/data/webqsp_mini split=test limit=20
    gsr-train llm-label-triples data.dir=rmanluo/RoG-webqsp retrieval=path/to/results_test.jsonl llm=openai

Hydra app (config: conf/prep/llm_label_triples.yaml; the endpoint: conf/llm/*.yaml). Writes
`{"id", "triples", "raw_response"}` rows (the gpt_triples format read by labelled-triple
recall) and a `.summary.json`. Resumable.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from gsr_train.commands import run_llm_step
from gsr_train.config import project_root, register_resolvers
from gsr_train.llm.steps.label_triples import run

register_resolvers()


@hydra.main(version_base="1.3", config_path=str(project_root() / "conf"), config_name="prep/llm_label_triples")
def main(cfg: DictConfig) -> None:

    run_llm_step(run, cfg)


if __name__ == "__main__":
    main()
