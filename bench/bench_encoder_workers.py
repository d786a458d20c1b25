"""MiniLM embedding table over workers: forked one-thread processes (now) against intra-op threads.

The embedding store used to spread a torch encoder over ``data.workers`` intra-op threads of one
process; on AVX-512 / AMX Xeons MKL then rounds differently with 1 and 2 threads, so the vectors
depended on the worker count. It now encodes each chunk on one intra-op thread, in ``workers``
forked processes that share the model. This bench builds the same table (real webqsp_mini entity
names and questions) three ways, each in a fresh cache folder, in one run:

* ``threads``: the old way, one process on ``workers`` intra-op threads;
* ``processes``: the new way, ``workers`` forked processes of one thread;
* ``1 worker``: one process, one thread (the reference bytes).

and prints texts/s, the ratio of the two parallel ways, peak RSS (this process and its largest
child) and whether each matrix is the same bytes as the one-worker matrix.

    .venv/bin/python bench/bench_encoder_workers.py [--data DIR] [--texts 4000] [--workers 2] [--repeat 2]

Writes the table and ``bench/results/bench_encoder_workers.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import tempfile
import time
from pathlib import Path

import torch
from benchutil import save_figures
from rich.console import Console
from rich.table import Table

from gsr_train.data.rows import load_rows
from gsr_train.numerics import intra_op_threads, numerics_record
from gsr_train.text.embeddings import embed_texts
from gsr_train.text.encoders import HFEncoder, load_encoder

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "webqsp_mini"


class ThreadedEncoder(HFEncoder):
    """The old way: one process, the model on ``threads`` intra-op threads."""

    threads = 2

    @property
    def parallel(self) -> str:  # type: ignore[override]
        return "serial"

    def encode(self, texts, batch_size=None, progress=None):
        with intra_op_threads(self.threads):
            return self._encode(list(texts), batch_size, progress)


def sample_texts(data: Path, n: int) -> list[str]:
    """Distinct entity names and questions of the fixture, the first ``n`` in a fixed order."""
    seen: dict[str, None] = {}
    for split in ("train", "validation", "test"):
        for row in load_rows(data, split)[0]:
            seen.setdefault(row.question, None)
            for h, _, t in row.graph:
                for name in (h, t):
                    if not name.startswith(("m.", "g.")):
                        seen.setdefault(name, None)
            if len(seen) >= n:
                return list(seen)[:n]
    return list(seen)[:n]


def one_way(texts: list[str], encoder, workers: int, repeat: int) -> dict:
    best, digest = float("inf"), ""
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            matrix = embed_texts(texts, encoder, Path(tmp), workers=workers, progress=False)
            best = min(best, time.perf_counter() - t0)
            digest = hashlib.sha256(matrix.numpy().tobytes()).hexdigest()
    return {"seconds": round(best, 2), "texts_per_s": round(len(texts) / best, 1), "sha256": digest}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--texts", type=int, default=4000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "bench_encoder_workers.json")
    args = ap.parse_args()
    texts = sample_texts(args.data, args.texts)
    minilm = load_encoder("minilm")
    minilm.prepare()
    threaded = ThreadedEncoder("minilm", minilm.path)
    threaded.threads = args.workers
    threaded._model, threaded._tokenizer = minilm._model, minilm._tokenizer
    ways = {
        "1 worker": one_way(texts, minilm, 1, args.repeat),
        "threads": one_way(texts, threaded, args.workers, args.repeat),
        "processes": one_way(texts, minilm, args.workers, args.repeat),
    }
    reference = ways["1 worker"]["sha256"]
    for way in ways.values():
        way["same_bytes_as_1_worker"] = way["sha256"] == reference
    ratio = round(ways["threads"]["seconds"] / ways["processes"]["seconds"], 2)
    rss = {
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "largest_child_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
    }
    table = Table(title=f"MiniLM table of {len(texts)} texts, {args.workers} workers (best of {args.repeat})")
    for column in ("way", "s", "texts/s", "same bytes as 1 worker"):
        table.add_column(column)
    for name, way in ways.items():
        table.add_row(name, str(way["seconds"]), str(way["texts_per_s"]), str(way["same_bytes_as_1_worker"]))
    Console().print(table)
    print(
        f"processes vs threads: {ratio}x; peak RSS {rss['peak_rss_mb']} MB "
        f"(largest child {rss['largest_child_rss_mb']} MB)"
    )
    save_figures(
        args.out,
        {
            "texts": len(texts),
            "workers": args.workers,
            "repeat": args.repeat,
            "torch_threads": torch.get_num_threads(),
            "numerics": numerics_record(),
            "ways": ways,
            "processes_vs_threads": ratio,
            **rss,
        },
    )


if __name__ == "__main__":
    main()
