"""``gsr-train llm-pseudo-questions`` (:mod:`gsr_train.commands.llm_step`): this script keeps the old
command line working."""

import sys

from gsr_train.commands.llm_step import main

if __name__ == "__main__":
    result = main(config="prep/llm_pseudo_questions")  # the figures (a dict) or an exit status
    sys.exit(result if isinstance(result, int) else 0)
