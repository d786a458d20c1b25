"""``gsr-train aggregate SWEEP_DIR``: one results table (CSV + Markdown) across the runs of a sweep."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer


def command(
    root: Annotated[str, typer.Argument(metavar="SWEEP_DIR", help="multirun folder (or any folder of run folders)")],
    no_write: Annotated[bool, typer.Option("--no_write", help="print only (no aggregate.csv / .md)")] = False,
) -> int:
    """One results table (CSV + Markdown) across the runs of a sweep."""
    if not Path(root).is_dir():  # one line before torch loads
        raise FileNotFoundError(f"{root}: no such folder (give a multirun folder or a folder of run folders)")
    from gsr_train.eval.aggregate import aggregate  # lazy: torch (help needs none)

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    rows = aggregate(root, write=not no_write)
    if not rows:
        raise FileNotFoundError(f"no run results under {root} (no run folder with a metrics.json there yet)")
    if not no_write:
        print(f"\nwrote {root}/aggregate.csv and aggregate.md ({len(rows)} rows)")
    return 0
