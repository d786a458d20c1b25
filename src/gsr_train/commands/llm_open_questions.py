"""Open-ended questions (OKGQA categories) about the topic entities of each graph, written by an LLM.

    gsr-train llm-open-questions data.dir=../shared/data/webqsp_mini split=test limit=20
    gsr-train llm-open-questions data.dir=rmanluo/RoG-webqsp per_graph=5 llm=openai

Hydra app (config: conf/prep/llm_open_questions.yaml; the endpoint: conf/llm/*.yaml). Writes
OpenQuestion rows `{"id", "graph_id", "question", "type", "entities", ..., "raw_response"}`
(read by gsr_train.data.open_questions.read_questions), a `.responses.jsonl.gz` and a
`.summary.json`. Resumable.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from gsr_train.commands import run_llm_step
from gsr_train.config import project_root, register_resolvers
from gsr_train.options.command_line import run_hydra

CONFIG = "prep/llm_open_questions"


@hydra.main(version_base="1.3", config_path=str(project_root() / "conf"), config_name=CONFIG)
def _main(cfg: DictConfig) -> None:
    run_llm_step("open_questions", cfg)


def main() -> None:
    """The command line: a mistake in the options is one line and exit 2 (:func:`run_hydra`)."""
    register_resolvers()
    run_hydra(_main, project_root() / "conf", CONFIG)


if __name__ == "__main__":
    main()
