"""``gsr-train reader score PREDICTIONS.jsonl [--out metrics.json]``: re-score a reader run's
``predictions_<variant>.jsonl`` with the QA metrics of `gsr_train.eval.qa` (the table printed,
the figures written as JSON with ``--out``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from gsr_train.clikit import SETTINGS, Command, run
from gsr_train.io import iter_jsonl, write_json

app = typer.Typer(
    name="reader", help="Re-score a reader run's predictions.", rich_markup_mode=None, context_settings=SETTINGS
)


@app.command("score", cls=Command)
def score(
    predictions: Annotated[
        str, typer.Argument(metavar="PREDICTIONS", help="a reader run's predictions_<variant>.jsonl")
    ],
    out: Annotated[str | None, typer.Option("--out", help="also write the figures as JSON here")] = None,
) -> int:
    """Re-score a reader run's predictions_<variant>.jsonl with the QA metrics (hit, F1, ...)."""
    from gsr_train.eval.qa import QAExample, qa_metrics  # lazy: torch (help needs none)

    rows = []
    for lineno, rec in iter_jsonl(predictions):
        if not isinstance(rec, dict) or "prediction" not in rec or "answers" not in rec:
            raise SystemExit(f"{predictions}: line {lineno}: needs 'prediction' and 'answers'")
        rows.append(
            QAExample(
                rec["id"],
                rec["prediction"],
                rec["answers"],
                rec.get("response", ""),
                bool(rec.get("in_kg", True)),
                int(rec.get("hops", -1)),
                rec.get("entities") or (),
            )
        )
    report = qa_metrics(rows)
    print(report.table(predictions))
    if out:
        write_json(out, report.to_dict())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(score, argv, "gsr-train reader score")


if __name__ == "__main__":
    raise SystemExit(main())
