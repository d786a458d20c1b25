"""``gsr-train score``: the QA scoreboard of prediction files of any system."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from gsr_train.commands import run
from gsr_train.io import write_json


def command(
    files: Annotated[
        list[str] | None,
        typer.Argument(metavar="FILE...", help="prediction files (JSONL, .gz too) of any supported format"),
    ] = None,
    data: Annotated[
        str | None, typer.Option("--data", help="folder of RoG-format splits: count the questions without a prediction")
    ] = None,
    split: Annotated[str, typer.Option("--split", help="the split of --data")] = "test",
    out: Annotated[str, typer.Option("--out", help="the figures as JSON")] = "scoreboard.json",
    skip_invalid: Annotated[
        bool, typer.Option("--skip_invalid", help="count and skip rows in no known format")
    ] = False,
    results: Annotated[str | None, typer.Option("--results", hidden=True)] = None,
) -> int:
    """QA scoreboard: prediction files of any system (ours, RoG's, SubgraphRAG's...) scored every
    way (hit, exact match, F1...), one table and a JSON file."""
    if results is not None:  # the retrieval form of the old two-in-one score verb
        raise typer.BadParameter(
            "the recall of a retrieval results file is `gsr-train recall --results F --data D` now",
            param_hint="--results",
        )
    if not files:
        raise typer.BadParameter("give one prediction file or more", param_hint="FILES")
    for f in files:
        if Path(f).is_dir():
            print(f"error: gsr-train score: {f} is a folder: give the prediction files in it", file=sys.stderr)
            return 2
        if not Path(f).is_file():
            print(f"error: gsr-train score: {f} does not exist", file=sys.stderr)
            return 2
    from gsr_train.eval.scoreboard import PredictionFormatError, counts_line, scoreboard, table  # lazy: torch

    try:
        rows = scoreboard(files, data, split, skip_invalid)
    except (PredictionFormatError, json.JSONDecodeError, OSError) as e:
        print(f"error: gsr-train score: {e}", file=sys.stderr)
        return 2
    print(table(rows))
    for line in filter(None, (counts_line(r, split) for r in rows)):
        print(line)
    write_json(out, {"split": split, "data": data, "rows": rows})
    print(f"\nwrote {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(command, argv, "gsr-train score")


if __name__ == "__main__":
    sys.exit(main())
