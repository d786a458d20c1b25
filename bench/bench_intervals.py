"""Bootstrap intervals and the paired comparison: seconds for a table row of 24 metrics.

    python bench/bench_intervals.py            # 300, 5,000 and 35,000 questions, 2,000 resamples

Each size: one row's intervals (:meth:`QuestionValues.intervals`) and the paired comparison of two
runs (:func:`paired_difference`: bootstrap interval + permutation p-value), on one CPU thread.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from gsr_train.eval.intervals import RESAMPLES, QuestionValues, paired_difference


def row(n: int, seed: int) -> QuestionValues:
    """24 metrics (6 x 4 Ks) of ``n`` questions: hits with 5% of the questions not counted."""
    rng = np.random.default_rng(seed)
    values = QuestionValues([f"q{i}" for i in range(n)])
    for m in range(6):
        for k in (10, 20, 50, 100):
            v = (rng.random(n) < 0.7).astype(float)
            v[rng.random(n) < 0.05] = np.nan
            values.add_mean(f"m{m}@{k}", v)
    return values


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[300, 5_000, 35_000])
    p.add_argument("--resamples", type=int, default=RESAMPLES)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"| questions | metrics | intervals (s) | paired comparison (s) |  ({args.resamples} resamples)")
    print("|---:|---:|---:|---:|")
    for n in args.sizes:
        a, b = row(n, 0), row(n, 1)
        t0 = time.perf_counter()
        a.intervals(args.resamples)
        t1 = time.perf_counter()
        paired_difference(a, b, args.resamples)
        t2 = time.perf_counter()
        print(f"| {n} | {len(a.parts)} | {t1 - t0:.2f} | {t2 - t1:.2f} |")


if __name__ == "__main__":
    main()
