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
from gsr_train.options.command_line import run_hydra

CONFIG = "prep/llm_label_triples"


@hydra.main(version_base="1.3", config_path=str(project_root() / "conf"), config_name=CONFIG)
def _main(cfg: DictConfig) -> None:
    run_llm_step("label_triples", cfg)


def main() -> None:
    """The command line: a mistake in the options is one line and exit 2 (:func:`run_hydra`)."""
    register_resolvers()
    run_hydra(_main, project_root() / "conf", CONFIG)


if __name__ == "__main__":
    main()
