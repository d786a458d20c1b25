"""Import a knowledge graph (TSV / CSV / N-Triples / N-Quads / parquet files) into a whole-KG store.

    gsr-train import-kg kg.tsv --out /data/my_kg
    gsr-train import-kg dump.nt.gz labels.nt.gz --out /data/dbpedia_kg --language en
    gsr-train import-kg triples.parquet --names names.tsv --out /data/my_kg --skip_bad

The store (memory-mapped columns, adjacency both ways, labels and aliases) is what ``data.kg=``
reads to cut the graphs of questions that come without one. Run it again after a kill: it resumes
from its last checkpoint; run it again on the same files: nothing to do. A bad line is one
``error: ...`` line naming the file and line (``--skip_bad``: counted by reason and left out).
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from gsr_train.commands import existing_paths
from gsr_train.commands import run as run_verb
from gsr_train.data.errors import report_user_errors


def command(
    files: Annotated[
        list[str],
        typer.Argument(help="KG files: .tsv .csv .parquet .nt .nq (each may be .gz)", callback=existing_paths),
    ],
    out: Annotated[
        str, typer.Option("--out", help="the store's folder (made; a store there is replaced only with --overwrite)")
    ],
    names: Annotated[
        str | None,
        typer.Option(
            "--names",
            help="entity<TAB>name lines: an entity's first name is its label, the rest aliases",
            callback=existing_paths,
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option("--format", help="tsv | csv | parquet | nt | nq for every file (default: each file's suffix)"),
    ] = None,
    skip_bad: Annotated[bool, typer.Option("--skip_bad", help="count bad lines by reason and leave them out")] = False,
    language: Annotated[str, typer.Option("--language", help="RDF labels in this language (or none) are kept")] = "en",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace another store in --out")] = False,
) -> dict:
    """Import a knowledge graph into a whole-KG store (resumable; the same files again: nothing to do)."""
    from gsr_train.kg.store_build import import_kg

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    meta = report_user_errors(import_kg, files, out, fmt, names, skip_bad, language, overwrite)
    print(describe(meta, out))
    return meta


def describe(meta: dict, out: str) -> str:
    """What the import made, in a few lines."""
    build, bad = meta["build"], meta["bad_lines"]
    counts = f"{meta['triples']:,} triples, {meta['entities']:,} entities ({meta['labelled_entities']:,} with a label)"
    made = f"{meta.get('action', 'built')}; {build['seconds']} s, peak RSS {build['peak_rss_mb']} MB"
    lines = [f"{out}: {counts}, {meta['relations']:,} relations ({made})"]
    if bad["total"]:
        reasons = ", ".join(f"{n:,} {why}" for why, n in bad["by_reason"].items())
        lines.append(f"bad lines left out: {bad['total']:,} ({reasons}; first: {', '.join(bad['first'].values())})")
    if meta.get("attributes_left_out"):
        lines.append(f"literal-valued triples (attributes) left out: {meta['attributes_left_out']:,}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    return run_verb(command, argv, "gsr-train import-kg")
