"""``gsr-train build-index`` (:mod:`gsr_train.commands.build_index`): this script keeps the old
command line working."""

import sys

from gsr_train.commands.build_index import main

if __name__ == "__main__":
    result = main()  # the figures (a dict) or an exit status
    sys.exit(result if isinstance(result, int) else 0)
