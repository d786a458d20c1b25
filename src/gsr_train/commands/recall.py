"""``gsr-train recall``: triple and answer recall@K of any retriever's results file."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from gsr_train.commands import DEFAULT_KS, Ks, cut_offs, data_source, existing_paths, run
from gsr_train.io import write_json


def command(
    results: Annotated[
        str,
        typer.Option("--results", help="retrieval results JSONL(.gz), one row per question", callback=existing_paths),
    ],
    data: Annotated[
        str, typer.Option("--data", help="dataset folder of RoG-format splits (or a hub name)", callback=data_source)
    ],
    split: Annotated[str, typer.Option("--split", help="the split the results are of")] = "test",
    labels: Annotated[
        str | None,
        typer.Option(
            "--labels",
            help="relevance labels JSONL(.gz) {id, triples} (e.g. gpt_triples_test)",
            callback=existing_paths,
        ),
    ] = None,
    ks: Ks = DEFAULT_KS,
    out: Annotated[str | None, typer.Option("--out", help="write the metrics JSON here")] = None,
    cache: Annotated[
        str | None, typer.Option("--cache", help="cache folder (default: $GSR_TRAIN_CACHE or ~/.cache/gsr_train)")
    ] = None,
    skip_unknown: Annotated[
        bool,
        typer.Option("--skip_unknown", help="count and skip unknown ids / triples not in the graph instead of failing"),
    ] = False,
    device: Annotated[str | None, typer.Option("--device", help="torch device for the metrics (default cpu)")] = None,
) -> int:
    """Triple and answer recall@K of a retrieval results file (any retriever's, JSONL, one row per
    question) on a dataset split, with the labelled-triple recall when --labels is given."""
    from gsr_train.eval.evaluate import counts_lines, evaluate_results  # lazy: torch
    from gsr_train.eval.results import TripleFileError

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        report = evaluate_results(
            results,
            data,
            split,
            labels,
            cut_offs(ks),
            cache,
            skip_unknown=skip_unknown,
            device=device,
            skip_option="--skip_unknown",
        )
    except (TripleFileError, FileNotFoundError, KeyError, ValueError) as e:
        print(f"error: gsr-train recall: {e}", file=sys.stderr)
        return 2
    print(report.table(f"{Path(results).name} on {split}", breakdowns=True))
    for line in counts_lines(report):
        print(line)
    if out:
        write_json(out, report.to_dict())
        print(f"\nmetrics written to {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(command, argv, "gsr-train recall")


if __name__ == "__main__":
    sys.exit(main())
