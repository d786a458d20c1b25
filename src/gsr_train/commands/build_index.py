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

import argparse
import logging
import resource
import time
from pathlib import Path
from typing import Any

from gsr_train.commands import add_split_and_cache_options, add_workers_option
from gsr_train.data.errors import folder_write_error, report_user_errors
from gsr_train.data.rog_corpus import CorpusSpec, write_corpus
from gsr_train.eval.markdown import markdown_table
from gsr_train.io import write_json
from gsr_train.kg.index import KGIndex, default_cache_dir, get_index

log = logging.getLogger("build_index")


def parse_rows(text: str) -> int:
    """``20M`` -> 20_000_000, ``500k`` -> 500_000, ``1e6`` -> 1_000_000."""
    raw = text.strip().lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}.get(raw[-1:], 1)
    try:
        value = float(raw[:-1] if scale > 1 else raw) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a row count: {text!r} (use e.g. 500k, 20M)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"row count must be positive, got {text!r}")
    return int(value)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", help="folder of RoG-format splits or a hub dataset name")
    parser.add_argument(
        "--generate",
        type=parse_rows,
        default=None,
        metavar="ROWS",
        help="write a generated RoG corpus of about ROWS triple rows into --out first",
    )
    parser.add_argument("--shape", default="webqsp", choices=["webqsp", "cwq"], help="split proportions (--generate)")
    parser.add_argument("--out", default=None, help="folder for the generated corpus (--generate)")
    add_split_and_cache_options(parser)
    parser.add_argument("--skip-invalid", action="store_true", help="skip (and count) malformed rows")
    parser.add_argument(
        "--allow-overlap",
        action="store_true",
        help="accept splits that share question ids or rows (train/test leakage)",
    )
    parser.add_argument("--batch-rows", type=int, default=64, help="questions per Arrow record batch")
    add_workers_option(parser)
    parser.add_argument("--json", default=None, help="summary JSON path")
    args = parser.parse_args(argv)
    # user mistakes first, before any long work
    if (args.data is None) == (args.generate is None):
        parser.error("give exactly one of --data DIR and --generate ROWS (with --out)")
    if args.generate is not None and not args.out:
        parser.error("--generate needs --out FOLDER for the corpus")
    if args.batch_rows < 1:
        parser.error(f"--batch-rows must be >= 1, got {args.batch_rows}")
    args.splits = tuple(s for s in args.splits.split(",") if s)
    if not args.splits:
        parser.error("--splits is empty")
    args.cache = Path(args.cache) if args.cache else default_cache_dir()
    return args


def main(argv=None) -> dict:
    """Parse, then build or verify; a user's error is one ``error: ...`` line and exit 2."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return report_user_errors(run, args, cache_dirs=[args.cache])


def generate(args: argparse.Namespace) -> dict:

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


def run(args: argparse.Namespace) -> dict:
    t_start = time.perf_counter()
    generated = generate(args) if args.generate is not None else None
    data = str(Path(args.out) / "data") if generated is not None else args.data
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
