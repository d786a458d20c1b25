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

import argparse
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Annotated

import torch
import typer

from gsr_train.clikit import run as run_verb
from gsr_train.commands import SPLITS, Cache, SkipInvalid, Splits, Workers
from gsr_train.data.errors import report_user_errors
from gsr_train.eval.markdown import markdown_table
from gsr_train.io import write_json
from gsr_train.kg.index import default_cache_dir, get_index
from gsr_train.kg.paths import DEFAULT_MAX_CHAINS, Supervision, get_supervision


def split_summary(sup: Supervision, split) -> dict:
    """The figures of one split's supervision, JSON-ready."""
    positives = sup.num_positives(split).float()
    with_path = sup.hops > 0
    raw = torch.tensor([len(c) for c in sup.chains_raw], dtype=torch.float)
    filtered = torch.tensor([len(c) for c in sup.chains_filtered], dtype=torch.float)

    def stats(x: torch.Tensor) -> dict:
        if x.numel() == 0:
            return {"mean": 0.0, "median": 0.0, "max": 0}
        return {"mean": round(float(x.mean()), 3), "median": float(x.median()), "max": int(x.max())}

    return {
        "questions": len(split),
        "with_path": int(with_path.sum()),
        "topic_is_answer_only": int((sup.hops == 0).sum()),
        "without_path": sup.num_no_path,
        "no_positive_triple": int((positives == 0).sum()),
        "hops": {str(k): v for k, v in sorted(Counter(sup.hops.tolist()).items())},
        "triples": int(split.edge_ptr[-1]),
        "positives": int(sup.triple_label.sum()),
        "positives_per_question": stats(positives),
        "positives_per_question_with_path": stats(positives[with_path]),
        "chains_raw": int(raw.sum()),
        "chains_filtered": int(filtered.sum()),
        "chains_raw_per_question": stats(raw),
        "chains_filtered_per_question": stats(filtered),
        "questions_with_filtered_chain": int((filtered > 0).sum()),
        "chain_cap": sup.max_chains,
        "questions_at_chain_cap": sup.num_chains_capped,
    }


def command(
    data: Annotated[str, typer.Option("--data", help="folder of RoG-format splits or a hub dataset name")],
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
    args = argparse.Namespace(
        data=data, splits=splits, max_chains=max_chains, skip_invalid=skip_invalid, workers=workers, json=json
    )
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    folder = Path(cache) if cache else default_cache_dir()
    # bad rows, missing splits, an unwritable cache: one line and exit 2, as in train.py
    return report_user_errors(run, args, folder, cache_dirs=[folder])


def main(argv: list[str] | None = None) -> dict:
    return run_verb(command, argv, "gsr-train supervision")


def run(args: argparse.Namespace, cache: Path) -> dict:
    splits = tuple(s for s in args.splits.split(",") if s)
    index = get_index(args.data, splits=splits, cache_dir=cache, skip_invalid=args.skip_invalid, workers=args.workers)
    summary = {"data": str(args.data), "index_key": index.key, "max_chains": args.max_chains, "splits": {}}
    for split in splits:
        t0 = time.perf_counter()
        sup = get_supervision(index, split, cache, max_chains=args.max_chains, workers=args.workers)
        summary["splits"][split] = {**split_summary(sup, index[split]), "seconds": round(time.perf_counter() - t0, 3)}

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
    row(f"at chain cap {args.max_chains}", lambda s: str(s["questions_at_chain_cap"]))
    row("seconds", lambda s: f"{s['seconds']:.2f}")
    title = f"shortest-path supervision of {args.data}"
    print(markdown_table(["", *summary["splits"]], rows, title=title) + "\n")
    out = Path(args.json) if args.json else cache / "supervision" / f"summary-{index.key}.json"
    write_json(out, summary)
    print(f"summary written to {out}")
    return summary


if __name__ == "__main__":
    main()
