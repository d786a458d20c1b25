"""The one place that keeps third-party noise out of a run's output and log files.

`install` runs once at the start of every command (``train.py``, ``eval.py``, ``gsr-train``)
before the libraries it silences are imported:

- Lightning's advertising tips (``💡 Tip: ... litlogger`` / ``litmodels``) are dropped from its
  rank-zero logger;
- warnings that are not the user's to act on: deprecations inside the libraries (``DeprecationWarning``,
  ``FutureWarning`` raised from third-party code), Lightning's ``log_every_n_steps`` and
  ``num_workers`` hints (a run's loaders and logging interval are set by the recipe);
- Hugging Face progress bars (transformers' ``Loading weights``, hub downloads) when stderr is not a
  terminal, where they are only noise in a log file; transformers logs warnings and errors only.

Our own warnings (``gsr_train.*``) and the libraries' real errors still show.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings

# messages (regular expressions, matched at the start) of warnings that say nothing to act on
QUIET_WARNINGS = (
    r"The number of training batches \(\d+\) is smaller than the logging interval",
    r"The '\w+_dataloader' does not have many workers",
    r"Consider setting `persistent_workers=True`",
    r"GPU available but not used",
)
TIP = re.compile(r"^\W*Tip: ")
LIGHTNING_LOGGERS = (
    "pytorch_lightning.utilities.rank_zero",
    "lightning_fabric.utilities.rank_zero",
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
)
_INSTALLED: list[bool] = []


class NoTips(logging.Filter):
    """Drops a library's advertising tips."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not TIP.match(str(record.msg))


def install(terminal: bool | None = None) -> None:
    """Silence the noise above (idempotent). ``terminal``: whether stderr is one (default: asked)."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    if not (sys.stderr.isatty() if terminal is None else terminal):
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers reads it too
        os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    for message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    for category in (DeprecationWarning, FutureWarning, PendingDeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
        warnings.filterwarnings("default", category=category, module=r"gsr_train(\.|$)")
    tips = NoTips()
    for name in LIGHTNING_LOGGERS:
        logging.getLogger(name).addFilter(tips)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # Optuna's storage: "setup plugin alembic.*" lines
    for name in ("httpx", "httpcore"):  # a line per HTTP request (SPARQL endpoints, LLM servers) at INFO
        logging.getLogger(name).setLevel(logging.WARNING)
