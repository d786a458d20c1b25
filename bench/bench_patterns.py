"""SimGRAG search: lower-bound pruning + greedy order vs the plain Algorithm 1 on webqsp_mini.

Same patterns (gold chains, and GSR chains when a results file is given), same candidate
sets; checks that both return the same subgraph distances, and reports partial matches
visited and search time per question (cost tables included). WebQSP-sized graphs: the
webqsp_mini test split has 1,197 triples per question on average, 3,000 at most.

    python bench/bench_patterns.py [--data ../shared/data/webqsp_mini] [--gsr-results FILE] [--limit N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> dict:
    from gsr_train.io import write_json
    from gsr_train.kg.index import get_index
    from gsr_train.kg.paths import get_supervision
    from gsr_train.patterns.sources import chain_patterns_from_results, gold_patterns
    from gsr_train.retrievers.options import SimGRAGConfig
    from gsr_train.retrievers.simgrag import simgrag_retrieve
    from gsr_train.text.embeddings import get_embeddings

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "webqsp_mini"))
    ap.add_argument("--split", default="test")
    ap.add_argument("--gsr-results", default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--ks", default="10,100")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "bench_patterns.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    index = get_index(args.data, splits=["train", "validation", "test"])
    emb = get_embeddings(index, "minilm", splits=[args.split])
    split = index[args.split]
    n = len(split) if args.limit is None else min(args.limit, len(split))
    sources = {"gold chains": gold_patterns(index, args.split, get_supervision(index, args.split).chains_filtered)}
    # a harder, LLM-like case: the first relation of 2-hop gold chains is UNKNOWN
    from gsr_train.patterns.pattern import Pattern, PatternEdge

    def blank_first(p):
        if len(p.edges) < 2:
            return p
        return Pattern(p.nodes, (PatternEdge(p.edges[0].head, p.edges[0].tail),) + p.edges[1:], "gold-r1-unknown")

    sources["gold 2-hop, r1 UNKNOWN"] = [
        [blank_first(p) for p in ps if len(p.edges) >= 2] for ps in sources["gold chains"]
    ]
    if args.gsr_results:
        sources["GSR chains"] = chain_patterns_from_results(args.gsr_results, index, args.split, skip_unknown=True)
    rows = []
    for name, pats in sources.items():
        pats = [p if q < n else [] for q, p in enumerate(pats)]
        for k in [int(x) for x in args.ks.split(",")]:
            out = {}
            for prune in (False, True):
                cfg = SimGRAGConfig(k=k, k_node=16, k_rel=16, prune=prune, max_partial=None)
                t0 = time.perf_counter()
                run = simgrag_retrieve(index, args.split, emb, pats, cfg)
                wall = time.perf_counter() - t0
                out[prune] = (run, wall)
            (plain, _), (pruned, _) = out[False], out[True]
            same = all(
                [round(s.distance, 9) for s in a] == [round(s.distance, 9) for s in b]
                for a, b in zip(plain.subgraphs, pruned.subgraphs)
            )
            ms_plain, ms_pruned = 1000 * sum(plain.seconds) / n, 1000 * sum(pruned.seconds) / n
            rows.append(
                {
                    "patterns": name,
                    "k": k,
                    "questions": n,
                    "same_distances": same,
                    "partial_plain": plain.stats.partial_matches,
                    "partial_pruned": pruned.stats.partial_matches,
                    "ms_plain": round(ms_plain, 2),
                    "ms_pruned": round(ms_pruned, 2),
                    "visit_ratio": round(plain.stats.partial_matches / max(pruned.stats.partial_matches, 1), 2),
                    "speedup": round(ms_plain / max(ms_pruned, 1e-9), 2),
                }
            )
    head = (
        "| patterns | k | questions | same top-k | partial matches plain | pruned | ratio | ms/q plain "
        "| ms/q pruned | speed-up |"
    )
    lines = [head, "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['patterns']} | {r['k']} | {r['questions']} | {r['same_distances']} | "
            f"{r['partial_plain']} | {r['partial_pruned']} | {r['visit_ratio']}x | {r['ms_plain']} | "
            f"{r['ms_pruned']} | {r['speedup']}x |"
        )
    g = split.num_edges[:n].float()
    table = (
        f"SimGRAG search on {Path(args.data).name} [{args.split}] ({g.mean():.0f} triples per graph on average, "
        f"{int(g.max())} max; k_node = k_rel = 16)\n\n" + "\n".join(lines)
    )
    print(table)
    result = {"rows": rows, "table": table, "data": args.data, "split": args.split}
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
