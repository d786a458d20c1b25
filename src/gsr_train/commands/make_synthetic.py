"""Write the embedded synthetic KGQA benchmark to a folder and print what it contains.

    gsr-train make-synthetic --out data/synthetic [--seed 0] [--num-train 800] ...

Every field of ``gsr_train.data.synthetic.SyntheticConfig`` is an option (``--num-people``,
``--max-triples``, ``--two-hop-fraction``, ...). The folder gets
``{train,validation,test}.jsonl.gz`` in the RoG row format (byte-identical for the same
options), ``question_meta.jsonl.gz`` (family, hops, gold relation chains per question)
and ``meta.json`` (options, file checksums and the figures printed here).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

from rich.console import Console

from gsr_train.data.errors import folder_write_error, report_user_errors
from gsr_train.data.synthetic import META_FILE, SPLITS, SyntheticConfig, build, write_build
from gsr_train.eval.markdown import markdown_table


def parse_args(argv: list[str] | None = None) -> tuple[Path, SyntheticConfig]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="folder to write (replaced if it exists)")
    for f in dataclasses.fields(SyntheticConfig):
        kind = float if f.type in ("float", float) else int
        ap.add_argument("--" + f.name.replace("_", "-"), type=kind, default=f.default, help=f"(default: {f.default})")
    args = ap.parse_args(argv)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(SyntheticConfig)}
    try:
        return args.out, SyntheticConfig(**values)
    except ValueError as e:
        ap.error(str(e))
        raise  # unreachable: ap.error exits


def print_summary(summary: dict, console: Console) -> None:
    cols = (
        "split",
        "questions",
        "1-hop",
        "2-hop",
        "2-topic",
        "answer missing",
        "none in graph",
        "mean",
        "median",
        "max",
    )
    rows = []
    for split in SPLITS:
        s = summary["splits"][split]
        rows.append(
            (
                split,
                s["questions"],
                s["hops"].get("1", 0),
                s["hops"].get("2", 0),
                f"{s['two_topic_share']:.1%}",
                f"{s['missing_answer_share']:.1%}",
                f"{s['no_answer_in_graph_share']:.1%}",
                f"{s['triples_mean']:.0f}",
                f"{s['triples_median']:.0f}",
                s["triples_max"],
            )
        )
    title = "synthetic benchmark (triples per graph: mean / median / max)"
    console.print(markdown_table(cols, rows, title=title) + "\n", markup=False, highlight=False)
    world = summary["world"]
    console.print(
        f"distinct entities in graphs: {summary['distinct_entities_in_graphs']} "
        f"({summary['distinct_named_entities_in_graphs']} named, the rest mediator mids); "
        f"distinct relations: {summary['distinct_relations_in_graphs']}\n"
        f"world: {world['entities']} entities ({world['mediators']} mediators), "
        f"{world['triples']} triples, {world['relations']} relations; highest degrees: "
        + ", ".join(f"{k} {v}" for k, v in world["max_degree"].items())
    )


def _write(out: Path, cfg: SyntheticConfig) -> None:
    try:
        write_build(out, build(cfg))
    except OSError as e:
        error = folder_write_error(e, out.parent, "the synthetic benchmark", "give --out a writable folder")
        if error is None:
            raise
        raise error from e


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out, cfg = parse_args(argv)
    t0 = time.perf_counter()
    # an unwritable --out: one ``error: ...`` line and exit 2, as in train.py
    report_user_errors(_write, out, cfg)
    summary = json.loads((out / META_FILE).read_text(encoding="utf-8"))["summary"]
    console = Console(width=max(Console().width, 110))
    print_summary(summary, console)
    console.print(f"wrote {out} in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
