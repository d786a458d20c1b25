"""``gsr-train robustness-render``: a robustness run's tables and plots, redrawn from its figures."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gsr_train.commands import run


def command(
    folder: Annotated[str, typer.Argument(metavar="FOLDER", help="a robustness run folder")],
    top_k: Annotated[int, typer.Option("--top_k", min=1, help="the K of the tables (recall@K)")] = 100,
) -> int:
    """Redraw a robustness run's tables and plots from its saved figures."""
    if not Path(folder).is_dir():
        raise FileNotFoundError(f"{folder}: no such folder")
    from gsr_train.robustness.run import render  # lazy: torch, matplotlib

    print(render(folder, top_k))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(command, argv, "gsr-train robustness-render")


if __name__ == "__main__":
    raise SystemExit(main())
