"""Write the embedded synthetic KGQA benchmark to a folder and print what it contains.

    gsr-train make-synthetic --out data/synthetic [--seed 0] [--num_train 800] ...

Every field of ``gsr_train.data.synthetic.SyntheticConfig`` is an option (``--num_people``,
``--max_triples``, ``--two_hop_fraction``, ...). The folder gets
``{train,validation,test}.jsonl.gz`` in the RoG row format (byte-identical for the same
options), ``question_meta.jsonl.gz`` (family, hops, gold relation chains per question)
and ``meta.json`` (options, file checksums and the figures printed here).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from gsr_train.commands import run
from gsr_train.data.errors import folder_write_error, report_user_errors
from gsr_train.data.synthetic import META_FILE, SPLITS, SyntheticConfig, build, write_build
from gsr_train.eval.markdown import markdown_table


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


def command(out: Path, **options: Any) -> int:
    """Write the embedded synthetic KGQA benchmark to a folder (byte-identical for the same options)
    and print what it contains. Every field of gsr_train.data.synthetic.SyntheticConfig is an option."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        cfg = SyntheticConfig(**options)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    t0 = time.perf_counter()
    # an unwritable --out: one ``error: ...`` line and exit 2, as in train.py
    report_user_errors(_write, out, cfg)
    summary = json.loads((out / META_FILE).read_text(encoding="utf-8"))["summary"]
    console = Console(width=max(Console().width, 110))
    print_summary(summary, console)
    console.print(f"wrote {out} in {time.perf_counter() - t0:.1f}s")
    return 0


def _option(f: dataclasses.Field) -> inspect.Parameter:
    kind = float if f.type in ("float", float) else int
    about = typer.Option("--" + f.name, help=f"SyntheticConfig.{f.name}")
    return inspect.Parameter(
        f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=Annotated[kind, about]
    )


# the typed signature typer reads: --out, then one option per field of SyntheticConfig
command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter(
            "out",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Annotated[Path, typer.Option("--out", help="folder to write (replaced if it exists)")],
        ),
        *map(_option, dataclasses.fields(SyntheticConfig)),
    ]
)


def main(argv: list[str] | None = None) -> int:
    return run(command, argv, "gsr-train make-synthetic")


if __name__ == "__main__":
    sys.exit(main())
