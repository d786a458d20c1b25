"""Batched retrieval metrics vs. the per-question Python loop, on the real webqsp_mini graphs.

For every split (test, validation, train) and all splits together, scores every edge with a
seeded cosine-like scorer (random entity / relation / question vectors, rounded to 2
decimals so ties occur, 5% of edges -inf), then computes shortest-path, GPT-labelled and
answer recall at K in {10, 20, 50, 100, 200} twice: with ``retrieval_metrics`` and with
``reference_metrics`` of tests/oracles/retrieval_reference.py (sorted lists and sets per
question). The numbers must agree within
1e-9; the table shows both times and the speed-up: "batched" is the best of N warm calls
(the split's padded layout is cached after the first call, as for per-epoch validation),
"cold" the first call including that layout; "cpu" columns use process CPU time, which is
less sensitive to other jobs on a shared machine than wall-clock time.

    .venv/bin/python bench/bench_metrics.py [--data DIR] [--threads 1] [--repeat 5] [--device cuda]

``--device cuda``: the batched metrics on the GPU (timed to their last kernel; no process-CPU
figure for them), the loop on the CPU as always.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
from benchutil import add_device_argument, device_info, device_label, peak_gpu_mb, peak_rss_mb, resolve_device, sync
from rich.console import Console
from rich.table import Table

from gsr_train.eval.labels import load_labelled_triples
from gsr_train.eval.retrieval import _LAYOUTS, retrieval_metrics
from gsr_train.io import write_json
from gsr_train.kg.index import SplitGraphs, _concat, default_cache_dir, get_index
from gsr_train.kg.paths import get_supervision

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the reference lives in tests/oracles
from tests.oracles.retrieval_reference import reference_metrics  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
KS = [10, 20, 50, 100, 200]


def cosine_like_scores(split: SplitGraphs, num_ent: int, num_rel: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    dim = 32
    ent, rel = torch.randn(num_ent, dim, generator=g), torch.randn(num_rel, dim, generator=g)
    ques = torch.randn(len(split), dim, generator=g)
    trip = split.global_edges()
    vec = ent[trip[:, 0]] + rel[trip[:, 1]] + ent[trip[:, 2]]
    scores = torch.cosine_similarity(vec, ques[split.edge_question()], dim=1)
    scores = (scores * 100).round() / 100  # ties
    scores[torch.rand(scores.numel(), generator=g) < 0.05] = float("-inf")
    return scores


def compare(a, b, path=""):
    """Largest absolute difference between two report dicts; raises on structural mismatch. The
    batched report's ``intervals`` (bootstrap bounds) have no counterpart in the reference: skipped."""
    if isinstance(a, dict):
        a = {k: v for k, v in a.items() if k != "intervals"}
        if set(a) != set(b):
            raise AssertionError(f"{path}: keys differ {sorted(set(a) ^ set(b))}")
        return max([compare(a[k], b[k], f"{path}/{k}") for k in a] or [0.0])
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            raise AssertionError(f"{path}: {a} vs {b}")
        return abs(a - b)
    if a != b:
        raise AssertionError(f"{path}: {a!r} != {b!r}")
    return 0.0


def best_time(fn, repeat: int, device: torch.device | str = "cpu"):
    """Best wall-clock and best CPU time over ``repeat`` runs (the machine may be shared); the
    device is synchronised around each run."""
    wall = cpu = float("inf")
    out = None
    for _ in range(repeat):
        sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        sync(device)
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "webqsp_mini"))
    p.add_argument("--cache", default=None, help="cache folder (default: GSR_TRAIN_CACHE or ~/.cache/gsr_train)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the loop uses one)")
    p.add_argument("--repeat", type=int, default=5, help="best of N runs for the batched code")
    p.add_argument("--loop-repeat", type=int, default=2, help="best of N runs for the loop")
    add_device_argument(p)
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "bench_metrics.json"))
    args = p.parse_args()
    device = resolve_device(args.device)
    cuda = device.type == "cuda"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    data = Path(args.data)
    args.cache = args.cache or default_cache_dir()
    index = get_index(data, cache_dir=args.cache)

    cases = {}
    for name in ("test", "validation", "train"):
        split = index[name]
        sup = get_supervision(index, name, args.cache)
        labelled, lq, _ = load_labelled_triples(data / f"gpt_triples_{name}.jsonl.gz", index, name)
        scores = cosine_like_scores(split, len(index.entities), len(index.relations), args.seed)
        cases[name] = (split, scores, sup.triple_label, labelled, lq, sup.hops)
    # all three splits as one big split (more questions per call)
    parts = list(cases.values())
    allq = _concat([s.graph(i) for s, *_ in parts for i in range(len(s))])
    cases["all"] = (allq, *[torch.cat([c[j] for c in parts]) for j in range(1, 6)])

    rows = []
    for name, (split, scores, sp, lab, lq, hops) in cases.items():
        _LAYOUTS.clear()  # first call: builds the split's padded layout (cached afterwards)

        def batched():
            return retrieval_metrics(split, scores, KS, sp, lab, lq, hops, device=device)

        t_cold, _, _ = best_time(batched, 1, device)
        t_batch, c_batch, rep = best_time(batched, args.repeat, device)
        t_loop, c_loop, ref = best_time(
            lambda: reference_metrics(split, scores, KS, sp, lab, lq, hops), args.loop_repeat
        )
        got = {k: v for k, v in rep.to_dict().items() if k not in ("meta", "intervals")}
        max_diff = compare(got, ref)
        assert max_diff <= 1e-9, f"{name}: batched and loop metrics differ by {max_diff}"
        rows.append(
            {
                "split": name,
                "questions": len(split),
                "edges": int(split.edge_ptr[-1]),
                "loop_s": t_loop,
                "batched_s": t_batch,
                "speedup": t_loop / t_batch,
                "batched_cold_s": t_cold,
                "speedup_cold": t_loop / t_cold,
                "loop_cpu_s": c_loop,
                "batched_cpu_s": None if cuda else c_batch,  # process CPU time says nothing of a GPU's work
                "speedup_cpu": None if cuda else c_loop / max(c_batch, 1e-9),
                "max_abs_diff": max_diff,
                "sp_recall@100": rep.overall["sp_recall"][100],
                "labelled_recall@100": rep.overall["labelled_recall"][100],
                "answer_recall@100": rep.overall["answer_recall"][100],
            }
        )

    info = device_info(device)
    table = Table(
        title=f"retrieval metrics, K={KS}, batched on {device_label(info)} vs per-question loop on the CPU "
        f"(best of {args.repeat} / {args.loop_repeat})"
    )
    for col in (
        "split",
        "questions",
        "edges",
        "loop s",
        "batched s",
        "speed-up",
        "cold s",
        "cold speed-up",
        "loop process CPU s",
        "batched process CPU s",
        "process CPU speed-up",
        "max |diff|",
        "sp@100",
        "gpt@100",
        "ans@100",
    ):
        table.add_column(col, justify="left" if col == "split" else "right")
    for r in rows:
        table.add_row(
            r["split"],
            str(r["questions"]),
            str(r["edges"]),
            f"{r['loop_s']:.3f}",
            f"{r['batched_s']:.4f}",
            f"{r['speedup']:.1f}x",
            f"{r['batched_cold_s']:.4f}",
            f"{r['speedup_cold']:.1f}x",
            f"{r['loop_cpu_s']:.3f}",
            "-" if r["batched_cpu_s"] is None else f"{r['batched_cpu_s']:.4f}",
            "-" if r["speedup_cpu"] is None else f"{r['speedup_cpu']:.1f}x",
            f"{r['max_abs_diff']:.1e}",
            f"{r['sp_recall@100']:.4f}",
            f"{r['labelled_recall@100']:.4f}",
            f"{r['answer_recall@100']:.4f}",
        )
    Console(width=200).print(table)
    write_json(
        args.out,
        {
            "ks": KS,
            "seed": args.seed,
            "threads": args.threads,
            "repeat": args.repeat,
            "loop_repeat": args.loop_repeat,
            "load_avg_1min": os.getloadavg()[0],
            "data": str(data),
            "torch": torch.__version__,
            "machine": info,
            "peak_rss_mb": peak_rss_mb(),
            "peak_gpu_mb": peak_gpu_mb(device),
            "rows": rows,
        },
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
