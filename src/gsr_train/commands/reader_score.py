"""``gsr-train reader score PREDICTIONS.jsonl [--out metrics.json]``: re-score a reader run's
``predictions_<variant>.jsonl`` with the QA metrics of :mod:`gsr_train.eval.qa` (the table printed,
the figures written as JSON with ``--out``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from gsr_train.eval.qa import QAExample, qa_metrics
from gsr_train.io import iter_jsonl, write_json


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gsr-train reader")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score", help="re-score a predictions_<variant>.jsonl file of a reader run")
    s.add_argument("predictions")
    s.add_argument("--out", default=None)
    args = p.parse_args(argv)
    rows = []
    for lineno, rec in iter_jsonl(args.predictions):
        if not isinstance(rec, dict) or "prediction" not in rec or "answers" not in rec:
            raise SystemExit(f"{args.predictions}: line {lineno}: needs 'prediction' and 'answers'")
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
    print(report.table(args.predictions))
    if args.out:
        write_json(args.out, report.to_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
