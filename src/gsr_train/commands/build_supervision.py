"""Build (or load) the shortest-path supervision of every split and print what it holds.

    gsr-train supervision --data ../shared/data/webqsp_mini [--cache DIR]
    gsr-train supervision --data rmanluo/RoG-cwq --max-chains 128

For each split: triple labels (every triple on a kept topic<->answer shortest path),
hops per question and GSR relation chains (raw: all kept paths; filtered: only the ones
that run from the topic entity to the answer), cached next to the KG index. Prints a
table per split (questions with / without a path, hop histogram, positives per question,
chains) and writes the same figures as JSON (``--json``, default
``<cache>/supervision/summary-<index key>.json``).

Bad rows, missing splits and an unwritable cache are one ``error: ...`` line and exit 2.
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import Annotated

import typer

from gsr_train.commands import SPLITS, Cache, SkipInvalid, Splits, Workers, data_source
from gsr_train.commands import run as run_verb
from gsr_train.config import DEFAULT_MAX_CHAINS, default_cache_dir
from gsr_train.data.errors import report_user_errors
from gsr_train.eval.markdown import markdown_table
from gsr_train.io import write_json


def command(
    data: Annotated[
        str, typer.Option("--data", help="folder of RoG-format splits or a hub dataset name", callback=data_source)
    ],
    splits: Splits = SPLITS,
    cache: Cache = None,
    max_chains: Annotated[
        int, typer.Option("--max_chains", min=1, help="cap on distinct relation chains per question")
    ] = DEFAULT_MAX_CHAINS,
    skip_invalid: SkipInvalid = False,
    workers: Workers = None,
    json: Annotated[str | None, typer.Option("--json", help="summary JSON path")] = None,
) -> dict:
    """Shortest-path supervision of every split (cached next to the index), with a summary table."""
    chosen = tuple(s for s in splits.split(",") if s)
    if not chosen:
        raise typer.BadParameter("no split given", param_hint="--splits")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    folder = Path(cache) if cache else default_cache_dir()
    # bad rows, missing splits, an unwritable cache: one line and exit 2, as in train.py
    job = functools.partial(run, max_chains=max_chains, skip_invalid=skip_invalid, workers=workers)
    return report_user_errors(job, data, chosen, folder, json, cache_dirs=[folder])


def main(argv: list[str] | None = None) -> dict:
    return run_verb(command, argv, "gsr-train supervision")


def run(
    data: str,
    splits: tuple[str, ...],
    cache: Path,
    json: str | None,
    *,
    max_chains: int,
    skip_invalid: bool,
    workers: int | None,
) -> dict:
    """Build or load each split's supervision, print its table and write the summary JSON."""
    from gsr_train.kg.index import get_index  # lazy: torch (help needs none)
    from gsr_train.kg.paths import get_supervision

    index = get_index(data, splits=splits, cache_dir=cache, skip_invalid=skip_invalid, workers=workers)
    summary: dict = {"data": str(data), "index_key": index.key, "max_chains": max_chains, "splits": {}}
    for split in splits:
        t0 = time.perf_counter()
        sup = get_supervision(index, split, cache, max_chains=max_chains, workers=workers)
        summary["splits"][split] = {**sup.summary(index[split]), "seconds": round(time.perf_counter() - t0, 3)}

    rows: list[list[str]] = []

    def row(label, fmt):
        rows.append([label, *(fmt(s) for s in summary["splits"].values())])

    row("questions", lambda s: str(s["questions"]))
    row("with a path", lambda s: str(s["with_path"]))
    row("without a path", lambda s: str(s["without_path"]))
    row("topic=answer only", lambda s: str(s["topic_is_answer_only"]))
    row("hops:questions", lambda s: " ".join(f"{k}:{v}" for k, v in s["hops"].items()))
    row("positives/triples", lambda s: f"{s['positives']} / {s['triples']}")
    row("pos/q mean/med/max", lambda s: "{mean:.1f} / {median:.0f} / {max}".format(**s["positives_per_question"]))
    row("raw chains (/q)", lambda s: f"{s['chains_raw']} ({s['chains_raw_per_question']['mean']:.2f})")
    row("filtered ch. (/q)", lambda s: f"{s['chains_filtered']} ({s['chains_filtered_per_question']['mean']:.2f})")
    row(f"at chain cap {max_chains}", lambda s: str(s["questions_at_chain_cap"]))
    row("seconds", lambda s: f"{s['seconds']:.2f}")
    title = f"shortest-path supervision of {data}"
    print(markdown_table(["", *summary["splits"]], rows, title=title) + "\n")
    out = Path(json) if json else cache / "supervision" / f"summary-{index.key}.json"
    write_json(out, summary)
    print(f"summary written to {out}")
    return summary


if __name__ == "__main__":
    main()
