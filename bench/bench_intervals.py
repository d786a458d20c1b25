"""Bootstrap intervals and the paired comparison: seconds for a table row of 24 metrics, and for the
biggest table a run prints (a retrieval report with its breakdowns).

    python bench/bench_intervals.py            # 300, 5,000 and 35,000 questions, 2,000 resamples

Each size: one row's intervals (:meth:`QuestionValues.intervals`), the paired comparison of two
runs (:func:`paired_difference`: bootstrap interval + permutation p-value), and every interval of a
retrieval report's tables (:attr:`RetrievalReport.intervals`: 3 recalls at 7 Ks, overall and in each
of 5 hop groups and 3 topic-entity groups, 189 figures), on one CPU thread.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from gsr_train.eval.intervals import RESAMPLES, QuestionValues, paired_difference
from gsr_train.eval.retrieval import HOP_GROUPS, TOPIC_GROUPS, GroupMetrics, RetrievalReport


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


def report(n: int, seed: int) -> RetrievalReport:
    """A retrieval report of ``n`` questions as retrieval_metrics leaves it: 3 recalls at 7 Ks (0/1
    values, 5% not counted), hop and topic-entity groups."""
    gen = torch.Generator().manual_seed(seed)
    ks = [1, 5, 10, 20, 50, 100, 200]
    values = {}
    for m in ("sp_recall", "labelled_recall", "answer_recall"):
        v = (torch.rand(n, len(ks), generator=gen) < 0.7).double()
        v[torch.rand(n, generator=gen) < 0.05] = float("nan")
        values[m] = v
    groups = {"hops": torch.randint(0, 5, (n,), generator=gen), "topics": torch.randint(0, 3, (n,), generator=gen)}
    overall = {m: dict.fromkeys(ks, 0.7) for m in values}
    rep = RetrievalReport(ks, n, overall, dict.fromkeys(values, n), per_question=values, group_ids=groups)
    rep.by_hops = {g: GroupMetrics(1, overall, dict.fromkeys(values, 1)) for g in HOP_GROUPS}
    rep.by_topics = {g: GroupMetrics(1, overall, dict.fromkeys(values, 1)) for g in TOPIC_GROUPS}
    return rep


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[300, 5_000, 35_000])
    p.add_argument("--resamples", type=int, default=RESAMPLES)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    head = "| questions | metrics | intervals (s) | paired comparison (s) | report tables, 189 figures (s) |"
    print(f"{head}  ({args.resamples} resamples)")
    print("|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        a, b = row(n, 0), row(n, 1)
        t0 = time.perf_counter()
        a.intervals(args.resamples)
        t1 = time.perf_counter()
        paired_difference(a, b, args.resamples)
        t2 = time.perf_counter()
        report(n, 0).intervals  # noqa: B018 (every figure of the report's tables)
        t3 = time.perf_counter()
        print(f"| {n} | {len(a.parts)} | {t1 - t0:.2f} | {t2 - t1:.2f} | {t3 - t2:.2f} |")


if __name__ == "__main__":
    main()
