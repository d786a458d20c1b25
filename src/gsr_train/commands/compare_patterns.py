"""``gsr-train compare-patterns``: SimGRAG / SAFE with their pattern sources, the cosine baseline,
SubgraphRAG and GSR in one table on the same split (:mod:`gsr_train.runs.pattern_compare`)."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence

import torch

from gsr_train.runs.pattern_compare import KS, compare


def _kv(items: Sequence[str]) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise SystemExit(f"expected key=value, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="gsr-train compare-patterns", description=(compare.__doc__ or "").split("\n")[0])
    ap.add_argument("--data", required=True, help="folder of RoG-format splits, or 'synthetic'")
    ap.add_argument("--split", default="test")
    ap.add_argument("--gsr-results", help="GSR results file (chains -> patterns, and the GSR row)")
    ap.add_argument("--gsr-metrics", help="GSR metrics.json (decoding time per question)")
    ap.add_argument("--subgraphrag-results", help="SubgraphRAG results_<split>.jsonl")
    ap.add_argument("--subgraphrag-ckpt", help="SubgraphRAG checkpoint (to time its retrieval here)")
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--cache-dir")
    ap.add_argument("--out", help="folder for comparison.md/json and the pattern retrievers' result files")
    ap.add_argument("--simgrag", nargs="*", default=[], metavar="KEY=VALUE", help="e.g. k=100 k_node=16 k_rel=16")
    ap.add_argument("--safe", nargs="*", default=[], metavar="KEY=VALUE", help="e.g. delta=1 k_schema=3 k_qg=5")
    ap.add_argument("--gold", choices=("filtered", "raw"), default="filtered")
    ap.add_argument("--max-chains", type=int, default=3, help="patterns per question from each chain source")
    ap.add_argument("--ks", default=",".join(map(str, KS)))
    ap.add_argument("--limit", type=int, help="first N questions only")
    ap.add_argument("--name", help="dataset name in the table title (default: the folder name)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    res = compare(
        args.data,
        args.split,
        gsr_results=args.gsr_results,
        gsr_metrics=args.gsr_metrics,
        subgraphrag_results=args.subgraphrag_results,
        subgraphrag_ckpt=args.subgraphrag_ckpt,
        encoder=args.encoder,
        cache_dir=args.cache_dir,
        out=args.out,
        simgrag=_kv(args.simgrag),
        safe=_kv(args.safe),
        gold=args.gold,
        max_chains=args.max_chains,
        ks=[int(x) for x in args.ks.split(",") if x],
        limit=args.limit,
        title=f"{args.name} [{args.split}]" if args.name else None,
    )
    print(res["table"])
    return res


if __name__ == "__main__":
    main()
