"""MiniLM throughput, warm embedding-cache load time and cosine scoring speed on webqsp_mini.

1. Encodes a fixed sample of real entity names and questions with MiniLM twice: batches
   in input order vs. sorted by length (the encoder's default); texts/s and speed-up
   (outputs must agree).
2. Loads the cached embeddings of the whole dataset (built first if missing: ~16k texts,
   a few minutes on 2 CPU cores) and times the warm load.
3. Scores every triple of the test split with the cosine baseline: blocked matmul over
   distinct items (``cosine_scores``) vs. gathering a question row per item; same numbers.

    .venv/bin/python bench/bench_embeddings.py [--data DIR] [--cache-dir /tmp/gsr_cache] [--sample 2000]
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from benchutil import best_time
from rich.console import Console
from rich.table import Table

from gsr_train.io import write_json
from gsr_train.kg.index import default_cache_dir, get_index, has_text
from gsr_train.retrievers.cosine import cosine_scores
from gsr_train.text.embeddings import get_embeddings
from gsr_train.text.encoders import load_encoder

REPO = Path(__file__).resolve().parents[1]


def gather_scores(split, q_emb, emb, chunk: int = 1 << 16) -> torch.Tensor:
    """The slower way: gather (and normalise) a question row and an item row per edge."""
    trip = split.global_edges()
    eq = split.edge_question()
    out = torch.empty(len(eq))
    has = emb.entity_has_text
    for s in range(0, len(eq), chunk):
        t = trip[s : s + chunk]
        q = F.normalize(q_emb[eq[s : s + chunk]], dim=-1)
        h = F.normalize(emb.entity[t[:, 0]], dim=-1) * has[t[:, 0], None]
        r = F.normalize(emb.relation[t[:, 1]], dim=-1)
        tt = F.normalize(emb.entity[t[:, 2]], dim=-1) * has[t[:, 2], None]
        out[s : s + chunk] = (q * (h + r + tt)).sum(-1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "webqsp_mini"))
    p.add_argument("--cache-dir", default=str(default_cache_dir()))
    p.add_argument("--sample", type=int, default=2000, help="entity names in the throughput sample")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "embeddings.json"))
    args = p.parse_args()

    index = get_index(args.data, cache_dir=args.cache_dir)
    names = [e for e in index.entities if has_text(e)]
    texts = random.Random(0).sample(names, min(args.sample, len(names))) + list(index["test"].questions)
    random.Random(1).shuffle(texts)
    enc = load_encoder("minilm", batch_size=args.batch_size)
    enc.encode(texts[:32])  # load weights outside the timing
    enc.sort_by_length = False
    t_plain, v_plain = best_time(lambda: enc.encode(texts, progress=False), 1)
    enc.sort_by_length = True
    t_sorted, v_sorted = best_time(lambda: enc.encode(texts, progress=False), 1)
    max_diff = float((v_plain - v_sorted).abs().max())

    t0 = time.perf_counter()
    get_embeddings(index, enc, args.cache_dir)  # builds the cache when it is missing
    t_first = time.perf_counter() - t0
    t_warm, emb = best_time(lambda: get_embeddings(index, enc, args.cache_dir), args.repeat)

    split = index["test"]
    q = emb.question["test"]
    t_gather, s_gather = best_time(lambda: gather_scores(split, q, emb), args.repeat)
    t_block, s_block = best_time(lambda: cosine_scores(split, q, emb), args.repeat)
    score_diff = float((s_gather - s_block).abs().max())

    figures = {
        "threads": torch.get_num_threads(),
        "sample_texts": len(texts),
        "batch_size": args.batch_size,
        "minilm_unsorted_texts_per_s": len(texts) / t_plain,
        "minilm_sorted_texts_per_s": len(texts) / t_sorted,
        "length_sort_speedup": t_plain / t_sorted,
        "sort_max_abs_diff": max_diff,
        "embeddings_first_call_s": t_first,
        "embeddings_warm_load_s": t_warm,
        "test_edges": int(split.edge_rel.numel()),
        "cosine_gather_s": t_gather,
        "cosine_blocked_s": t_block,
        "cosine_speedup": t_gather / t_block,
        "cosine_max_abs_diff": score_diff,
    }
    table = Table(title=f"embeddings and cosine scoring ({torch.get_num_threads()} threads)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("MiniLM, batches in input order", f"{figures['minilm_unsorted_texts_per_s']:.0f} texts/s"),
        ("MiniLM, batches sorted by length", f"{figures['minilm_sorted_texts_per_s']:.0f} texts/s"),
        ("length-sort speed-up", f"{figures['length_sort_speedup']:.2f}x (max diff {max_diff:.1e})"),
        ("get_embeddings, first call this run", f"{t_first:.2f} s"),
        ("get_embeddings, warm cache", f"{t_warm * 1000:.0f} ms"),
        (f"cosine, per-edge gathers ({figures['test_edges']} edges)", f"{t_gather:.3f} s"),
        ("cosine, blocked matmul (cosine_scores)", f"{t_block:.3f} s"),
        ("cosine speed-up", f"{figures['cosine_speedup']:.2f}x (max diff {score_diff:.1e})"),
    ]
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    write_json(args.out, figures)
    print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
