"""Array-based shortest-path supervision vs. the networkx reference, on real webqsp_mini graphs.

The reference is what the SubgraphRAG public code does, with its parallel-edge bug fixed:
one networkx ``MultiDiGraph`` per question and ``nx.all_shortest_paths`` per (topic,
answer) pair in both directions, labelling every parallel edge on a kept path
(``tests/oracles/paths_oracle.py``). Both run on the same questions of the train split
(all of them unless ``--ref-budget`` seconds run out first); labels and hops must be
identical. ``build_supervision`` is timed with its relation chains included (the
reference does not compute chains), best of ``--repeat`` runs; it is also timed on every
whole split.

    .venv/bin/python bench/bench_supervision.py [--data DIR] [--cache DIR] [--ref-budget 90]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch
from benchutil import best_time
from rich.console import Console
from rich.table import Table

from gsr_train.io import write_json
from gsr_train.kg.index import default_cache_dir, get_index
from gsr_train.kg.paths import DEFAULT_MAX_CHAINS, build_supervision

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the test oracle lives in tests/, not in the package
from tests.oracles.paths_oracle import oracle_question  # noqa: E402


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "webqsp_mini"))
    parser.add_argument(
        "--cache", default=None, help="KG index cache (default: $GSR_TRAIN_CACHE or ~/.cache/gsr_train)"
    )
    parser.add_argument("--split", default="train")
    parser.add_argument("--ref-budget", type=float, default=90.0, help="seconds for the networkx reference")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-chains", type=int, default=DEFAULT_MAX_CHAINS)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "bench_supervision.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)

    index = get_index(args.data, cache_dir=args.cache or default_cache_dir())
    split = index[args.split]

    # reference, question by question, until the budget runs out
    labels, hops, done = [], [], []
    t0 = time.perf_counter()
    for i in range(len(split)):
        label, h, _, _ = oracle_question(split, i)
        labels.append(label)
        hops.append(h)
        done.append(i)
        if time.perf_counter() - t0 > args.ref_budget:
            break
    t_ref = time.perf_counter() - t0
    ref_label, ref_hops = torch.cat(labels), torch.tensor(hops, dtype=torch.long)

    same = split if len(done) == len(split) else split.subset(done)
    t_ours, sup = best_time(lambda: build_supervision(same, max_chains=args.max_chains), args.repeat)
    labels_equal = torch.equal(sup.triple_label, ref_label)
    hops_equal = torch.equal(sup.hops, ref_hops)
    if not (labels_equal and hops_equal):
        bad = (sup.hops != ref_hops).nonzero().flatten().tolist()[:5]
        raise AssertionError(f"labels equal: {labels_equal}, hops equal: {hops_equal}; first hop mismatches: {bad}")

    whole = {}
    for name in index.splits:
        t, s = best_time(lambda: build_supervision(index[name], max_chains=args.max_chains), args.repeat)
        whole[name] = {
            "questions": len(index[name]),
            "triples": int(index[name].edge_ptr[-1]),
            "seconds": round(t, 4),
            "questions_per_s": round(len(index[name]) / t, 1),
            "no_path": s.num_no_path,
            "positives": int(s.triple_label.sum()),
        }

    result = {
        "data": args.data,
        "split": args.split,
        "compared_questions": len(done),
        "split_questions": len(split),
        "compared_triples": int(same.edge_ptr[-1]),
        "positives": int(ref_label.sum()),
        "labels_identical": labels_equal,
        "hops_identical": hops_equal,
        "networkx_s": round(t_ref, 3),
        "build_supervision_s": round(t_ours, 4),
        "speedup": round(t_ref / t_ours, 1),
        "build_supervision_includes_chains": True,
        "whole_splits": whole,
        "repeat": args.repeat,
        "threads": 1,
    }

    table = Table(title=f"shortest-path supervision, {args.data} [{args.split}]")
    for col in ("method", "questions", "triples", "seconds", "questions/s", "speed-up"):
        table.add_column(col, justify="left" if col == "method" else "right")
    table.add_row(
        "networkx reference",
        str(len(done)),
        str(result["compared_triples"]),
        f"{t_ref:.2f}",
        f"{len(done) / t_ref:.0f}",
        "1.0x",
    )
    table.add_row(
        "build_supervision",
        str(len(done)),
        str(result["compared_triples"]),
        f"{t_ours:.3f}",
        f"{len(done) / t_ours:.0f}",
        f"{result['speedup']:.1f}x",
    )
    for name, w in whole.items():
        table.add_row(
            f"  whole {name} split",
            str(w["questions"]),
            str(w["triples"]),
            f"{w['seconds']:.3f}",
            f"{w['questions_per_s']:.0f}",
            "",
        )
    console = Console()
    console.print(table)
    console.print(
        "reference: MultiDiGraph + nx.all_shortest_paths per pair (labels, hops); "
        "build_supervision: labels, hops and relation chains"
    )
    console.print(f"labels identical: {labels_equal} ({result['positives']} positives), hops identical: {hops_equal}")
    write_json(args.out, result)
    console.print(f"written to {args.out}")
    return result


if __name__ == "__main__":
    main()
