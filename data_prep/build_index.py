"""Build (or verify) the memory-mapped KG index of a RoG dataset and print what it holds.

    python data_prep/build_index.py --data /path/to/RoG-cwq        # folder of {split}-*.parquet shards
    python data_prep/build_index.py --data rmanluo/RoG-webqsp --skip-invalid
    python data_prep/build_index.py --generate 20M --shape webqsp --out /big/disk/webqsp20m

The index is built once per input (streamed in Arrow record batches, resumable after a
kill, one builder at a time) into the cache folder every run then memory-maps. A cached
index is verified (sizes and checksums) instead of rebuilt. ``--generate N`` first writes
a deterministic RoG-format corpus of about N triple rows (``k`` / ``M`` suffixes) into
``--out`` and indexes that: real-size data for trying the pipeline on a new machine.

Prints one table (questions, triples, entities, relations, bytes on disk, seconds, peak
RSS) and writes the same figures as JSON (``--json``, default next to the index as
``<cache>/kg_index/summary-<key>.json``).
"""
from __future__ import annotations

import argparse
import logging
import resource
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gsr_train.io import write_json
from gsr_train.kg.index import SplitOverlapError, default_cache_dir, get_index, index_key

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


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", help="folder of RoG-format splits or a hub dataset name")
    parser.add_argument("--generate", type=parse_rows, default=None, metavar="ROWS",
                        help="write a generated RoG corpus of about ROWS triple rows into --out first")
    parser.add_argument("--shape", default="webqsp", choices=["webqsp", "cwq"], help="split proportions (--generate)")
    parser.add_argument("--out", default=None, help="folder for the generated corpus (--generate)")
    parser.add_argument("--splits", default="train,validation,test", help="comma separated")
    parser.add_argument("--cache", "--cache-dir", dest="cache", default=None,
                        help="cache folder (default: $GSR_TRAIN_CACHE or ~/.cache/gsr_train)")
    parser.add_argument("--skip-invalid", action="store_true", help="skip (and count) malformed rows")
    parser.add_argument("--allow-overlap", action="store_true",
                        help="accept splits that share question ids or rows (train/test leakage)")
    parser.add_argument("--batch-rows", type=int, default=64, help="questions per Arrow record batch")
    parser.add_argument("--json", default=None, help="summary JSON path")
    args = parser.parse_args(argv)
    # user mistakes first, before any long work
    if (args.data is None) == (args.generate is None):
        parser.error("give exactly one of --data DIR and --generate ROWS (with --out)")
    if args.generate is not None and not args.out:
        parser.error("--generate needs --out FOLDER for the corpus")
    if args.batch_rows < 1:
        parser.error(f"--batch-rows must be >= 1, got {args.batch_rows}")
    splits = tuple(s for s in args.splits.split(",") if s)
    if not splits:
        parser.error("--splits is empty")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    t_start = time.perf_counter()
    generated = None
    data = args.data
    if args.generate is not None:
        from gsr_train.data.rog_corpus import CorpusSpec, write_corpus

        spec = CorpusSpec.from_rows(args.generate, shape=args.shape)
        t0 = time.perf_counter()
        generated = write_corpus(spec, args.out)
        generated = {**generated, "seconds": round(time.perf_counter() - t0, 2)}
        data = str(Path(args.out) / "data")
        log.info("corpus of %s triple rows in %s (%.1fs)", f"{generated['triples']:,}", data, generated["seconds"])
    cache = Path(args.cache) if args.cache else default_cache_dir()
    try:
        key = index_key(data, splits, args.skip_invalid)  # missing splits / files fail here, clearly
    except (FileNotFoundError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    folder = cache / "kg_index" / key
    meta_file = folder / "meta.json"
    before = meta_file.stat().st_mtime_ns if meta_file.exists() else None
    t0 = time.perf_counter()
    try:
        index = get_index(data, splits=splits, cache_dir=cache, skip_invalid=args.skip_invalid,
                          batch_rows=args.batch_rows, allow_overlap=args.allow_overlap)
    except SplitOverlapError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    seconds = time.perf_counter() - t0
    meta = index.meta or {}
    summary = {
        "data": str(data), "index_key": index.key, "folder": str(folder),
        "action": "built" if before is None else
        ("verified cached index" if meta_file.stat().st_mtime_ns == before else "rebuilt damaged cache"),
        "seconds": round(seconds, 2), "peak_rss_mb": round(peak_rss_mb(), 1),
        "build_seconds": meta.get("build_seconds"), "build_peak_rss_mb": meta.get("build_peak_rss_mb"),
        "entities": len(index.entities), "relations": len(index.relations),
        "bytes": folder_bytes(folder), "generated": generated, "splits": {}, "overlap": meta.get("overlap") or {},
        "total_seconds": round(time.perf_counter() - t_start, 2),
    }
    for split in splits:
        graphs = index[split]
        skips = (meta.get("skips") or {}).get(split, {})
        summary["splits"][split] = {
            "questions": len(graphs), "triples": graphs.total_edges,
            "local_entities": int(graphs.ent_ptr[-1]),
            "skipped_rows": sum((skips.get("skipped") or {}).values()),
            "duplicate_triples_dropped": skips.get("duplicate_triples_dropped", 0),
        }

    table = Table(title=f"KG index of {data} ({summary['action']})")
    for col in ("split", "questions", "triples", "local entities", "skipped rows", "dup. triples"):
        table.add_column(col, justify="right" if col != "split" else "left")
    for split, s in summary["splits"].items():
        table.add_row(split, f"{s['questions']:,}", f"{s['triples']:,}", f"{s['local_entities']:,}",
                      str(s["skipped_rows"]), f"{s['duplicate_triples_dropped']:,}")
    console = Console()
    console.print(table)
    console.print(f"entities {summary['entities']:,}  relations {summary['relations']:,}  "
                  f"on disk {summary['bytes'] / 2**20:,.0f} MB  "
                  f"this call {summary['seconds']:.1f}s, peak RSS {summary['peak_rss_mb']:,.0f} MB  "
                  f"(build: {summary['build_seconds']}s, peak RSS {summary['build_peak_rss_mb']} MB)")
    out = Path(args.json) if args.json else cache / "kg_index" / f"summary-{index.key}.json"
    write_json(out, summary)
    print(f"summary written to {out}")
    return summary


if __name__ == "__main__":
    main()
