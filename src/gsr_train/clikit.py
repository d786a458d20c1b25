"""The typer glue of the ``gsr-train`` verbs (`gsr_train.cli`): each verb is a typed function
(its options as ``--snake_case``, spelled as the Hydra configs spell their keys: ``--top_k``,
``--cache_dir``), turned into a click command by `command`; a module's ``main(argv)`` runs
its verb through `run`, so ``python -m MODULE``, the ``data_prep/`` scripts and the tests run
the very command ``gsr-train VERB`` runs.

An old ``--kebab-case`` spelling (and ``--k`` for ``--top_k``) still works, with one deprecation
line on stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import typer
from typer.core import TyperCommand

USAGE_EXIT = 2  # a command line the verb refuses (as argparse and gsr_train.data.errors.USER_ERROR_EXIT)
RENAMED = {"--k": "--top_k"}  # old option names that were not just the kebab spelling
# one width wherever it runs: the help reads the same in a terminal, a pipe and docs/reference/cli.md
SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100, "terminal_width": 100}


class Command(TyperCommand):
    """A verb: its ``--old-spelling`` options still parse, each with a deprecation line."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, [self._spelled(a) for a in args])

    def _spelled(self, arg: str) -> str:
        head, eq, tail = arg.partition("=")
        if not head.startswith("--") or head == "--":
            return arg
        names = {o for p in self.params for o in getattr(p, "opts", ())}
        new = RENAMED.get(head) or "--" + head[2:].replace("-", "_")
        if head in names or new not in names:
            return arg
        print(f"warning: {head} is spelled {new} now (as in the configs); {head} will go", file=sys.stderr)
        return new + eq + tail


def command(fn: Callable[..., Any], name: str, *, help: str | None = None) -> Any:
    """The click command of the typed function ``fn`` (its docstring is its help)."""
    app = typer.Typer(add_completion=False, rich_markup_mode=None, context_settings=SETTINGS)
    app.command(name=name, help=help, cls=Command)(fn)
    return typer.main.get_command(app)


def run(fn: Callable[..., Any], argv: Sequence[str] | None, prog: str) -> Any:
    """Run the verb ``fn`` on ``argv`` (default: this process's arguments) as ``prog``; its return
    value back (a dict of figures, an exit status). A refused command line: click's message, exit 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return command(fn, prog.split()[-1]).main(args, prog_name=prog, standalone_mode=False)
    except typer.Exit as e:  # --help
        raise SystemExit(e.exit_code) from None
    except typer.TyperException as e:  # click's usage errors (BadParameter, NoSuchOption...)
        print(f"error: {prog}: {one_line(e)}", file=sys.stderr)
        raise SystemExit(USAGE_EXIT) from None


def one_line(err: Any) -> str:
    """A refused command line's message in one line (click's, without pydantic's prefix)."""
    return " ".join(err.format_message().replace("Value error, ", "").split())
