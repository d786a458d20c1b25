"""``gsr-train reader score PREDICTIONS.jsonl [--out metrics.json]``: re-score a reader run's
``predictions_<variant>.jsonl`` with the QA metrics of `gsr_train.eval.qa` (the table printed,
the figures written as JSON with ``--out``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from gsr_train.clikit import SETTINGS, Command
from gsr_train.commands import existing_paths, run
from gsr_train.io import iter_jsonl, write_json

app = typer.Typer(
    name="reader", help="Re-score a reader run's predictions.", rich_markup_mode=None, context_settings=SETTINGS
)


@app.command("score", cls=Command)
def score(
    predictions: Annotated[
        str,
        typer.Argument(
            metavar="PREDICTIONS", help="a reader run's predictions_<variant>.jsonl", callback=existing_paths
        ),
    ],
    out: Annotated[str | None, typer.Option("--out", help="also write the figures as JSON here")] = None,
) -> int:
    """Re-score a reader run's predictions_<variant>.jsonl with the QA metrics (hit, F1, ...)."""
    from gsr_train.eval.qa import qa_metrics  # lazy: torch (help needs none)
    from gsr_train.eval.scoreboard import PredictionFormatError

    if Path(predictions).is_dir():
        print(f"error: gsr-train reader score: {predictions} is a folder: give a predictions file", file=sys.stderr)
        return 2
    try:
        rows = [_example(rec, f"{predictions}: line {lineno}") for lineno, rec in iter_jsonl(predictions)]
    except (PredictionFormatError, OSError) as e:
        print(f"error: gsr-train reader score: {e}", file=sys.stderr)
        return 2
    report = qa_metrics(rows)
    print(report.table(predictions))
    if out:
        write_json(out, report.to_dict())
    return 0


def _example(rec: Any, where: str) -> Any:
    """One row as the QA metrics read it, checked as ``gsr-train score`` checks a row (the same message)."""
    from gsr_train.eval.qa import QAExample
    from gsr_train.eval.scoreboard import PredictionFormatError, parse_row

    prediction, kind = parse_row(rec, where)
    if kind != "gsr" or "id" not in rec:
        raise PredictionFormatError(
            f"{where}: not a row of a reader run's predictions (it has 'id', 'prediction' as a list and "
            "'answers'); `gsr-train score FILE` scores other systems' prediction files"
        )
    hops = rec.get("hops", -1)
    if isinstance(hops, bool) or not isinstance(hops, int):
        raise PredictionFormatError(f"{where}: 'hops' must be a whole number, got {hops!r}")
    entities = rec.get("entities") or []
    if not isinstance(entities, list) or not all(isinstance(e, str) for e in entities):
        raise PredictionFormatError(f"{where}: 'entities' must be a list of names, got {entities!r}")
    return QAExample(
        prediction.id,
        prediction.answers,
        prediction.gold,
        prediction.response,
        bool(rec.get("in_kg", True)),
        hops,
        entities,
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run(score, argv, "gsr-train reader score")


if __name__ == "__main__":
    raise SystemExit(main())
