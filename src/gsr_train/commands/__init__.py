"""The ``gsr-train`` verbs (`gsr_train.cli`): one module each, with the verb as a typed function
(``command``) and a ``main(argv)`` that runs it. The scripts in ``data_prep/`` call these, so their
old command lines keep working."""

import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from gsr_train import clikit
from gsr_train.config import names_a_path
from gsr_train.data.errors import USER_ERROR_EXIT, report_user_errors, user_error_message
from gsr_train.eval.schema import RECALL_KS
from gsr_train.runtime import quiet, shutdown

# what the verbs raise for a wrong path or option (the message names the file or value)
VERB_ERRORS = (FileNotFoundError, NotADirectoryError, ValueError, RuntimeError)


def verb_error(err: Exception, prog: str) -> int:
    """A user's error in the verb ``prog``: ``error: PROG: ...`` on stderr and exit status 2 (the
    format of train.py's errors); anything else is a bug and keeps its traceback."""
    message = user_error_message(err, extra=VERB_ERRORS)
    if message is None:
        raise err
    print(f"error: {prog}: {message}", file=sys.stderr)
    return USER_ERROR_EXIT


def run(fn: Callable[..., Any], argv: Sequence[str] | None, prog: str) -> Any:
    """`gsr_train.clikit.run` with a user's error reported as ``gsr-train VERB`` reports it, so
    ``python -m gsr_train.commands.X`` (and the ``data_prep/`` scripts) say the same one line; the
    process is set up as ``gsr-train`` sets up its own (`gsr_train.runtime.quiet`, `gsr_train.runtime.shutdown`)."""
    quiet.install()
    shutdown.install()
    try:
        return clikit.run(fn, argv, prog)
    except Exception as e:
        return verb_error(e, prog)


def workers_count(text: str) -> int:
    """``--workers`` as an integer >= 1 (anything else is the user's mistake, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or str(value) != text.strip():
        raise typer.BadParameter(f"expected an integer >= 1 (the default is the cores available), got {text!r}")
    return value


def data_source(value: str | None) -> str | None:
    """``--data``: a folder or file that exists, or a hub dataset name. A path that is not there is
    refused as the command line is read, before the verb loads torch or asks the hub."""
    if value is not None and names_a_path(value) and not Path(value).exists():  # as the loaders read it
        raise typer.BadParameter(f"{value} does not exist (give a folder of splits, or a hub dataset name)")
    return value


def existing_paths(value: str | list[str] | None) -> str | list[str] | None:
    """A path argument (or several) that must exist: refused as the command line is read, one line."""
    for path in [value] if isinstance(value, str) else value or []:
        if not Path(path).expanduser().exists():
            raise typer.BadParameter(f"{path} does not exist")
    return value


def run_folders(value: list[str]) -> list[str]:
    """Run folders that must exist and hold their scores (``metrics.json``; a run that did not finish
    is named with how to continue it); the rest of what is inside them is the verb's to check."""
    from gsr_train.runtime.run_folder import unscored

    for path in value:
        if not Path(path).is_dir():
            raise typer.BadParameter(f"{path}: no such run folder")
        why = unscored(path)
        if why:
            raise typer.BadParameter(why)
    return value


# the options every data step shares, spelled as the configs spell them
Splits = Annotated[str, typer.Option("--splits", help="splits to prepare, comma separated")]
Cache = Annotated[
    str | None,
    typer.Option("--cache_dir", "--cache", help="cache folder (default: $GSR_TRAIN_CACHE or ~/.cache/gsr_train)"),
]
Workers = Annotated[
    int | None,
    typer.Option(
        "--workers",
        parser=workers_count,
        metavar="<int>",
        help="threads / processes preparing the data (default: the cores available; the output is the same for any)",
    ),
]
SkipInvalid = Annotated[bool, typer.Option("--skip_invalid", help="skip (and count) malformed rows")]
SPLITS = "train,validation,test"
DEFAULT_KS = ",".join(map(str, RECALL_KS))  # --ks's default, as typed


def _checked_cut_offs(text: str) -> str:
    """``--ks`` refused as the command line is read (the verb reads it with `cut_offs`)."""
    cut_offs(text)
    return text


Ks = Annotated[str, typer.Option("--ks", help="recall cut-offs, comma separated", callback=_checked_cut_offs)]


def cut_offs(text: str) -> list[int]:
    """``--ks 10,50,100`` as numbers >= 1 (anything else is the user's mistake, exit 2)."""
    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        ks = []
    if not ks or min(ks) < 1:
        raise typer.BadParameter(f"{text!r}: expected cut-offs >= 1, comma separated (10,50,100)", param_hint="--ks")
    return ks


def run_llm_step(step: str, cfg) -> None:
    """Run the LLM data step ``gsr_train.llm.steps.<step>`` on its Hydra config. A wrong option or input
    file (the steps raise ValueError / FileNotFoundError naming it), bad rows, an unreachable
    endpoint or an unwritable cache: one ``error: ...`` line and exit 2, as in train.py."""
    # lazy: the steps import the KG index and torch (2-5 s), after Hydra has refused any mistake in the options
    run = importlib.import_module(f"gsr_train.llm.steps.{step}").run
    from gsr_train.llm.client import LLMRequestError

    report_user_errors(
        run,
        cfg,
        extra=(ValueError, FileNotFoundError, LLMRequestError),
        cache_dirs=[cfg.get("paths", {}).get("cache_dir")],
    )
