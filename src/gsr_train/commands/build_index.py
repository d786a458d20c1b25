"""Build (or verify) the memory-mapped KG index of a RoG dataset and print what it holds.

    gsr-train build-index --data /path/to/RoG-cwq        # folder of {split}-*.parquet shards
    gsr-train build-index --data rmanluo/RoG-webqsp --skip-invalid
    gsr-train build-index --generate 20M --shape webqsp --out /big/disk/webqsp20m

The index is built once per input (streamed in Arrow record batches, resumable after a
kill, one builder at a time) into the cache folder every run then memory-maps. A cached
index is verified (sizes and checksums) instead of rebuilt. ``--generate N`` first writes
a deterministic RoG-format corpus of about N triple rows (``k`` / ``M`` suffixes) into
``--out`` and indexes that: real-size data for trying the pipeline on a new machine.

Prints one table (questions, triples, entities, relations, skipped rows and rows lost, bytes
on disk, seconds, peak RSS) and writes the same figures as JSON (``--json``, default next to
the index as ``<cache>/kg_index/summary-<key>.json``). ``action`` says what this call did:
``built``, ``resumed`` (a killed build, continued after checking its files), ``opened`` (a
cached index, verified), ``rebuilt damaged cache`` or ``waited for another builder``.

Bad rows, unreadable or missing files, leakage between splits and an unwritable cache are
one line on stderr (``error: ...``) and exit status 2, as in train.py.
"""

from __future__ import annotations

import logging
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from gsr_train.commands import SPLITS, Cache, SkipInvalid, Splits, Workers, data_source
from gsr_train.commands import run as run_verb
from gsr_train.config import default_cache_dir
from gsr_train.data.errors import folder_write_error, report_user_errors
from gsr_train.eval.markdown import markdown_table
from gsr_train.io import write_json

if TYPE_CHECKING:
    from gsr_train.kg.index import KGIndex

log = logging.getLogger("build_index")


def parse_rows(text: str) -> int:
    """``20M`` -> 20_000_000, ``500k`` -> 500_000, ``1e6`` -> 1_000_000."""
    raw = text.strip().lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}.get(raw[-1:], 1)
    try:
        value = float(raw[:-1] if scale > 1 else raw) * scale
    except ValueError:
        raise typer.BadParameter(f"not a row count: {text!r} (use e.g. 500k, 20M)") from None
    if value < 1:
        raise typer.BadParameter(f"row count must be positive, got {text!r}")
    return int(value)


@dataclass(frozen=True)
class Build:
    """One build-index call's choices, checked: what `run` needs."""

    data: str | None
    generate: int | None
    shape: str
    out: str | None
    splits: tuple[str, ...]
    cache: Path
    skip_invalid: bool
    allow_overlap: bool
    batch_rows: int
    workers: int | None
    json: str | None


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def command(
    data: Annotated[
        str | None,
        typer.Option("--data", help="folder of RoG-format splits or a hub dataset name", callback=data_source),
    ] = None,
    generate: Annotated[
        int | None,
        typer.Option(
            "--generate",
            parser=parse_rows,
            metavar="ROWS",
            help="write a generated RoG corpus of about ROWS triple rows (500k, 20M) into --out first",
        ),
    ] = None,
    shape: Annotated[
        Literal["webqsp", "cwq"], typer.Option("--shape", help="split proportions (--generate)")
    ] = "webqsp",
    out: Annotated[str | None, typer.Option("--out", help="folder for the generated corpus (--generate)")] = None,
    splits: Splits = SPLITS,
    cache: Cache = None,
    skip_invalid: SkipInvalid = False,
    allow_overlap: Annotated[
        bool, typer.Option("--allow_overlap", help="accept splits that share question ids or rows (train/test leakage)")
    ] = False,
    batch_rows: Annotated[int, typer.Option("--batch_rows", min=1, help="questions per Arrow record batch")] = 64,
    workers: Workers = None,
    json: Annotated[str | None, typer.Option("--json", help="summary JSON path")] = None,
) -> dict:
    """Build (or verify) the memory-mapped KG index of a RoG dataset and print what it holds: once
    per input, resumable after a kill; a cached index is verified instead of rebuilt."""
    # user mistakes first, before any long work
    if (data is None) == (generate is None):
        raise typer.BadParameter("give exactly one of --data DIR and --generate ROWS (with --out)", param_hint="--data")
    if generate is not None and not out:
        raise typer.BadParameter("--generate needs --out FOLDER for the corpus", param_hint="--out")
    chosen = tuple(s for s in splits.split(",") if s)
    if not chosen:
        raise typer.BadParameter("no split given", param_hint="--splits")
    args = Build(
        data=data,
        generate=generate,
        shape=shape,
        out=out,
        splits=chosen,
        cache=Path(cache) if cache else default_cache_dir(),
        skip_invalid=skip_invalid,
        allow_overlap=allow_overlap,
        batch_rows=batch_rows,
        workers=workers,
        json=json,
    )
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return report_user_errors(run, args, cache_dirs=[args.cache])


def main(argv: list[str] | None = None) -> dict:
    """Parse, then build or verify; a user's error is one ``error: ...`` line and exit 2."""
    return run_verb(command, argv, "gsr-train build-index")


def generate(args: Build) -> dict:
    """Write the generated corpus of ``--generate`` into ``--out``."""
    from gsr_train.data.rog_corpus import CorpusSpec, write_corpus  # lazy: pyarrow (help needs none)

    assert args.generate is not None and args.out is not None  # checked by command()
    spec = CorpusSpec.from_rows(args.generate, shape=args.shape)
    t0 = time.perf_counter()
    try:
        generated = write_corpus(spec, args.out)
    except OSError as e:
        error = folder_write_error(e, args.out, "the generated corpus", "give --out a writable folder")
        if error is None:
            raise
        raise error from e
    generated = {**generated, "seconds": round(time.perf_counter() - t0, 2)}
    log.info("corpus of %s triple rows in %s/data (%.1fs)", f"{generated['triples']:,}", args.out, generated["seconds"])
    return generated


def run(args: Build) -> dict:
    """Build or verify the index, print its table and write the summary JSON."""
    from gsr_train.kg.index import get_index  # lazy: torch (help needs none)

    t_start = time.perf_counter()
    generated = generate(args) if args.generate is not None else None
    data = str(Path(str(args.out)) / "data") if generated is not None else str(args.data)
    t0 = time.perf_counter()
    index = get_index(
        data,
        splits=args.splits,
        cache_dir=args.cache,
        skip_invalid=args.skip_invalid,
        batch_rows=args.batch_rows,
        allow_overlap=args.allow_overlap,
        workers=args.workers,
    )
    summary = summarize(index, data, args.cache / "kg_index" / index.key, time.perf_counter() - t0)
    summary.update(generated=generated, total_seconds=round(time.perf_counter() - t_start, 2))
    print_summary(summary, data)
    out = Path(args.json) if args.json else args.cache / "kg_index" / f"summary-{index.key}.json"
    try:
        write_json(out, summary)
    except OSError as e:
        error = folder_write_error(e, out.parent, "the summary", "give --json a writable path")
        if error is None:
            raise
        raise error from e
    print(f"summary written to {out}")
    return summary


def summarize(index: KGIndex, data: str, folder: Path, seconds: float) -> dict:
    """The figures of the table, JSON-ready; ``action`` is what get_index did in this call."""
    meta = index.meta or {}
    summary: dict[str, Any] = {
        "data": str(data),
        "index_key": index.key,
        "folder": str(folder),
        "action": index.action,
        "build": meta.get("build"),
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "build_seconds": meta.get("build_seconds"),
        "build_peak_rss_mb": meta.get("build_peak_rss_mb"),
        "entities": len(index.entities),
        "relations": len(index.relations),
        "bytes": folder_bytes(folder),
        "splits": {},
        "overlap": meta.get("overlap") or {},
        "skips": index.describe_skips(),
    }
    for split, skips in index.skip_summary().items():
        graphs = index[split]
        summary["splits"][split] = {
            "questions": len(graphs),
            "triples": graphs.total_edges,
            "local_entities": int(graphs.ent_ptr[-1]),
            **{
                k: skips[k]
                for k in (
                    "skipped_rows",
                    "skipped",
                    "truncated_files",
                    "rows_lost",
                    "rows_lost_exact",
                    "duplicate_triples_dropped",
                )
            },
        }
    return summary


def _rows_lost(s: dict) -> str:
    """Skipped rows; ``N+`` when a truncated file lost a tail of unknown length."""
    return f"{s['rows_lost']:,}" + ("" if s["rows_lost_exact"] else "+")


def print_summary(summary: dict, data: str) -> None:
    """What the index holds, as a Markdown table (the style of every table gsr-train prints)."""
    cols = ("split", "questions", "triples", "local entities", "skipped rows", "rows lost", "dup. triples")
    rows = [
        (
            split,
            f"{s['questions']:,}",
            f"{s['triples']:,}",
            f"{s['local_entities']:,}",
            f"{s['skipped_rows']:,}",
            _rows_lost(s),
            f"{s['duplicate_triples_dropped']:,}",
        )
        for split, s in summary["splits"].items()
    ]
    print(markdown_table(cols, rows, title=f"KG index of {data} ({summary['action']})") + "\n")
    if any(s["rows_lost"] or not s["rows_lost_exact"] for s in summary["splits"].values()):
        print(f"rows lost: {summary['skips']}")
    print(
        f"entities {summary['entities']:,}  relations {summary['relations']:,}  "
        f"on disk {summary['bytes'] / 2**20:,.0f} MB  "
        f"this call {summary['seconds']:.1f}s, peak RSS {summary['peak_rss_mb']:,.0f} MB  "
        f"(build: {summary['build_seconds']}s, peak RSS {summary['build_peak_rss_mb']} MB)"
    )


if __name__ == "__main__":
    main()
