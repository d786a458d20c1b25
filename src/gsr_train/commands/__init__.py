"""The ``gsr-train`` subcommands that prepare data (``build-index``, ``supervision``, ``embed``,
``make-synthetic`` and the LLM data steps): one module each with a ``main(argv)``. The scripts in
``data_prep/`` call these, so their old command lines keep working."""

import argparse
import importlib
import logging

from gsr_train.data.errors import report_user_errors
from gsr_train.llm.client import LLMRequestError


def add_split_and_cache_options(parser) -> None:
    """``--splits`` and ``--cache`` (alias ``--cache-dir``), the same in every data step."""
    parser.add_argument("--splits", default="train,validation,test", help="comma separated")
    parser.add_argument(
        "--cache",
        "--cache-dir",
        dest="cache",
        default=None,
        help="cache folder (default: $GSR_TRAIN_CACHE or ~/.cache/gsr_train)",
    )


def workers_count(text: str) -> int:
    """``--workers`` as an integer >= 1 (argparse reports anything else as the user's mistake)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or str(value) != text.strip():
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 (the default is the cores available), got {text!r}")
    return value


def add_workers_option(parser) -> None:
    """``--workers``, the same in every data step that builds the index, embeddings or supervision."""
    parser.add_argument(
        "--workers",
        type=workers_count,
        default=None,
        help="threads / processes preparing the data (default: the cores available; the output is the same for any)",
    )


def run_llm_step(step: str, cfg) -> None:
    """Run the LLM data step ``gsr_train.llm.steps.<step>`` on its Hydra config. A wrong option or input
    file (the steps raise ValueError / FileNotFoundError naming it), bad rows, an unreachable
    endpoint or an unwritable cache: one ``error: ...`` line and exit 2, as in train.py."""
    # lazy: the steps import the KG index and torch (2-5 s), after Hydra has refused any mistake in the options
    run = importlib.import_module(f"gsr_train.llm.steps.{step}").run
    logging.getLogger("httpx").setLevel(logging.WARNING)
    report_user_errors(
        run,
        cfg,
        extra=(ValueError, FileNotFoundError, LLMRequestError),
        cache_dirs=[cfg.get("paths", {}).get("cache_dir")],
    )
