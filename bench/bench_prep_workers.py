"""Data preparation over workers (``data.workers``): index build, embeddings, supervision at 20M rows.

Each stage runs in a process of its own, once per worker count (``--workers``, default 1 and 2)
and ``--repeat`` times, each time with a fresh cache folder so that nothing is reused:

* ``build``: the streaming KG index of the corpus (``get_index``);
* ``embeddings``: entity, relation and question tables with the hashing encoder
  (``get_embeddings``), on an index built once beforehand;
* ``supervision``: shortest-path supervision of every split (``get_supervision``).

Per stage and count: the stage's own seconds (measured around the call in the child, so the
interpreter's start, the imports and the opening of the index are left out; best of the
repeats), the process's wall seconds, its peak RSS (``wait4``: the largest single process, forked
workers included) and the unique memory of the whole process tree at its peak (sampled USS: what
forked workers add), the speed-up over one worker and whether every output file has the same
checksum as with one worker. The 16-core column is a projection, not a measurement: Amdahl's law
with the serial fraction that the 1 -> 2 speed-up implies (Karp-Flatt: ``e = (2/S - 1)``,
``S16 = 1 / (e + (1 - e) / 16)``), on this machine's per-core speed.

    .venv/bin/python bench/bench_prep_workers.py [--rows 20M] [--work /tmp/gsr_scale] [--workers 1,2] [--repeat 2]

The corpus is generated into ``--work`` when absent (``gsr_train.data.rog_corpus``, WebQSP shape).
Writes the table and ``bench/results/bench_prep_workers.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

from bench_scale import label, parse_rows, run_stage
from benchutil import save_figures
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
SPLITS = ["train", "validation", "test"]
STAGES = ("build", "embeddings", "supervision")
VOLATILE_META = ("build_seconds", "build_peak_rss_mb", "build_workers", "build", "seconds")


# ----------------------------------------------------------------------------- child: one stage
def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            h.update(block)
    return h.hexdigest()


def _checksums(folder: Path, pattern: str) -> dict:
    """Checksum of every output file (a meta.json less its clock and worker count)."""
    out = {}
    for path in sorted(folder.rglob(pattern)):
        if not path.is_file() or ".partial" in str(path) or path.name.endswith(".lock"):
            continue
        rel = str(path.relative_to(folder))
        if path.name == "meta.json":
            meta = {k: v for k, v in json.loads(path.read_text()).items() if k not in VOLATILE_META}
            meta.pop("cache_dir", None)
            out[rel] = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()
        else:
            out[rel] = _sha(path)
    return out


def child(args: argparse.Namespace) -> None:
    """Run one stage with ``args.workers`` and write its seconds and output checksums as JSON."""
    from gsr_train.kg.index import get_index

    cache = Path(args.cache)
    if args.stage == "build":
        t0 = time.perf_counter()
        index = get_index(args.data, SPLITS, cache_dir=cache, skip_invalid=True, workers=args.workers)
        seconds = time.perf_counter() - t0
        sums = _checksums(cache / "kg_index" / index.key, "*")
    else:
        index = get_index(args.data, SPLITS, cache_dir=args.index_cache, skip_invalid=True)  # built before
        t0 = time.perf_counter()
        if args.stage == "embeddings":
            from gsr_train.text.embeddings import get_embeddings

            get_embeddings(index, "hashing", cache, progress=False, workers=args.workers)
            seconds = time.perf_counter() - t0
            sums = _checksums(cache / "embeddings", "*")
        else:
            from gsr_train.kg.paths import get_supervision

            for split in SPLITS:
                get_supervision(index, split, cache, workers=args.workers)
            seconds = time.perf_counter() - t0
            sums = _checksums(cache / "supervision", "*-*.pt")
    Path(args.out).write_text(json.dumps({"seconds": round(seconds, 3), "checksums": sums}))


# ----------------------------------------------------------------------------- parent
def measure(stage: str, workers: int, run: int, data: Path, work: Path, index_cache: Path) -> dict:
    cache = work / "prep-workers" / f"{stage}-w{workers}-r{run}"
    shutil.rmtree(cache, ignore_errors=True)
    out = cache.with_suffix(".json")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", stage, "--workers", str(workers)]
    cmd += ["--data", str(data), "--cache", str(cache), "--index-cache", str(index_cache), "--out", str(out)]
    env = {"GSR_TRAIN_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO / "src")}
    proc = run_stage(cmd, env, work / "prep-workers" / f"{stage}-w{workers}-r{run}.log", sample=True)
    result = json.loads(out.read_text())
    shutil.rmtree(cache, ignore_errors=True)  # the next run starts cold too
    return {
        "seconds": result["seconds"],
        "process_seconds": proc["seconds"],
        "peak_rss_mb": proc["peak_rss_mb"],
        "tree_uss_mb": proc["memory"]["total_uss_mb"],
        "checksums": result["checksums"],
    }


def projection(speedup: float, cores: int = 16) -> float:
    """Amdahl with the serial fraction the 2-worker speed-up implies (Karp-Flatt), at ``cores``."""
    serial = min(1.0, max(0.0, 2 / speedup - 1))
    return 1 / (serial + (1 - serial) / cores)


def summarize(runs: dict[str, dict[int, list[dict]]], counts: list[int]) -> dict:
    out: dict = {}
    for stage, by_count in runs.items():
        best = {w: min(r, key=lambda x: x["seconds"]) for w, r in by_count.items()}
        base = best[counts[0]]
        rows = {}
        for w in counts:
            b = best[w]
            speedup = base["seconds"] / b["seconds"]
            rows[str(w)] = {
                "seconds": b["seconds"],
                "seconds_all_runs": [r["seconds"] for r in by_count[w]],
                "process_seconds": b["process_seconds"],
                "peak_rss_mb": max(r["peak_rss_mb"] for r in by_count[w]),
                "tree_uss_mb": max(r["tree_uss_mb"] for r in by_count[w]),
                "speedup": round(speedup, 2),
                "identical_to_1_worker": all(r["checksums"] == base["checksums"] for r in by_count[w]),
                "files_compared": len(base["checksums"]),
            }
        two = rows.get("2")
        out[stage] = {
            "workers": rows,
            "serial_fraction_karp_flatt": round(min(1.0, max(0.0, 2 / two["speedup"] - 1)), 3) if two else None,
            "projected_16_cores_speedup": round(projection(two["speedup"]), 2) if two else None,
        }
    return out


def table(figures: dict, title: str) -> Table:
    t = Table(title=title)
    for col in ("stage", "workers", "seconds", "speed-up", "peak RSS GB", "tree USS GB", "identical", "16 cores*"):
        t.add_column(col, justify="left" if col in ("stage", "identical") else "right")
    for stage, f in figures.items():
        for i, (w, r) in enumerate(f["workers"].items()):
            t.add_row(
                stage if i == 0 else "",
                w,
                f"{r['seconds']:.2f}",
                f"{r['speedup']:.2f}x",
                f"{r['peak_rss_mb'] / 1024:.2f}",
                f"{r['tree_uss_mb'] / 1024:.2f}",
                ("yes" if r["identical_to_1_worker"] else "NO") + f" ({r['files_compared']} files)",
                f"{f['projected_16_cores_speedup']:.1f}x" if i == 0 and f["projected_16_cores_speedup"] else "",
            )
    return t


def main(argv=None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="20M", help="corpus size in triple rows (WebQSP shape)")
    parser.add_argument("--work", default=os.environ.get("GSR_SCALE_DIR", "/tmp/gsr_scale"), help="corpora and caches")
    parser.add_argument("--workers", default="1,2", help="worker counts, comma separated (the first is the baseline)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per stage and count (the fastest is reported)")
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--out-json", default=str(REPO / "bench" / "results" / "bench_prep_workers.json"))
    # child mode (one stage in a process of its own)
    parser.add_argument("--child", choices=STAGES, dest="stage", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--index-cache", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stage:
        args.workers = int(args.workers)
        child(args)
        return None

    rows, work = parse_rows(args.rows), Path(args.work)
    counts = [int(w) for w in args.workers.split(",") if w]
    corpus = work / f"webqsp{label(rows)}"
    data = corpus / "data"
    console = Console(stderr=True)
    if not (corpus / "corpus.json").exists():
        console.log(f"generating a {label(rows)}-row corpus in {corpus}")
        from gsr_train.data.rog_corpus import CorpusSpec, write_corpus

        write_corpus(CorpusSpec.from_rows(rows, shape="webqsp"), corpus)
    spec = json.loads((corpus / "corpus.json").read_text())
    index_cache = work / "prep-workers" / "index"
    stages = [s for s in args.stages.split(",") if s]
    if set(stages) - {"build"}:
        console.log("index for the embeddings and supervision stages")
        run_stage(
            [
                sys.executable,
                "-c",
                f"from gsr_train.kg.index import get_index; get_index({str(data)!r}, {SPLITS!r}, "
                f"cache_dir={str(index_cache)!r}, skip_invalid=True)",
            ],
            {"PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"},
        )
    runs: dict[str, dict[int, list[dict]]] = {s: {w: [] for w in counts} for s in stages}
    for run in range(args.repeat):
        for stage in stages:
            for w in counts:  # counts alternate within a repeat: load from the rest of the machine hits both
                console.log(f"{stage}, {w} worker(s), run {run + 1}/{args.repeat}")
                runs[stage][w].append(measure(stage, w, run, data, work, index_cache))
    figures = summarize(runs, counts)
    cpus = len(os.sched_getaffinity(0))
    title = (
        f"data preparation over workers: {spec['triples'] / 1e6:.1f}M-row WebQSP-shaped corpus, "
        f"{spec['questions']:,} questions, {cpus} cores (* 16 cores: projection, not measured)"
    )
    Console(width=160).print(table(figures, title))
    doc = {
        "bench": "prep_workers",
        "cpus": cpus,
        "corpus": {"rows": spec["triples"], "questions": spec["questions"], "folder": str(corpus)},
        "repeat": args.repeat,
        "encoder": "hashing",
        "projection": "16 cores: Amdahl's law with the serial fraction implied by the measured 1 -> 2 speed-up "
        "(Karp-Flatt), on this machine's per-core speed; not a measurement",
        "stages": figures,
    }
    save_figures(args.out_json, doc)
    return doc


if __name__ == "__main__":
    main()
