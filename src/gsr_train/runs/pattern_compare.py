"""One table for pattern retrievers and triple retrievers on the same split and metrics.

    python -m gsr_train.runs.pattern_compare --data ../shared/data/webqsp_mini --split test \
        --gsr-results RUN/results_test.jsonl --gsr-metrics RUN/metrics.json \
        --subgraphrag-results SG/results_test.jsonl --subgraphrag-ckpt SG/checkpoints/best.ckpt \
        --out outputs/patterns_compare

Runs SimGRAG and SAFE with GSR-chain patterns (from ``--gsr-results``) and gold patterns
(the shortest-path chains of the weak supervision, an oracle), runs the cosine baseline,
reads SubgraphRAG and GSR from their results files, and reports answer recall at K (the
retrieved triples in rank order; a subgraph retriever returns fewer than K triples when its
subgraphs hold fewer, shown in the "triples" column) and retrieval time per question:
measured here for SimGRAG / SAFE (cost tables + search; SAFE also its schema join; the
one-off schema build is reported separately), cosine (whole split scored at once) and
SubgraphRAG (re-scored from ``--subgraphrag-ckpt`` when given); GSR's is its decoding time
from ``--gsr-metrics`` (beam search on the machine that ran it). Writes
``comparison.md`` / ``comparison.json`` and the SimGRAG / SAFE result files into ``--out``.
``--data synthetic`` uses the embedded benchmark (generated into the cache if needed).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from gsr_train.arrays import segment_sum
from gsr_train.io import atomic_write, write_json

log = logging.getLogger(__name__)
KS = (10, 20, 50, 100, 200)


def resolve_data(data: str, cache_dir: Path) -> str:
    if data == "synthetic":
        from gsr_train.data.synthetic import ensure_synthetic

        return str(ensure_synthetic({}, cache_dir))
    return data


def _recall(split, scores: torch.Tensor, ks: Sequence[int], limit: int | None) -> dict[str, float]:
    from gsr_train.eval.retrieval import retrieval_metrics

    if limit is not None and limit < len(split):
        scores = scores[: int(split.edge_ptr[limit])]
        split = split.subset(range(limit))
    rep = retrieval_metrics(split, scores, list(ks)).to_dict()
    rec = rep["overall"]["answer_recall"] if "overall" in rep else rep["answer_recall"]
    return {str(k): float(v) for k, v in rec.items()}


def _mean_retrieved(split, scores: torch.Tensor, cap: int, limit: int | None) -> float:
    n = len(split) if limit is None else min(limit, len(split))
    found = torch.isfinite(scores[: int(split.edge_ptr[n])]).numpy()
    per_q = torch.from_numpy(segment_sum(found, split.edge_ptr[: n + 1].numpy())).clamp(max=cap)
    return float(per_q.float().mean()) if n else 0.0


def compare(
    data: str,
    split_name: str = "test",
    *,
    gsr_results: str | None = None,
    gsr_metrics: str | None = None,
    subgraphrag_results: str | None = None,
    subgraphrag_ckpt: str | None = None,
    encoder: str = "minilm",
    cache_dir: str | Path | None = None,
    out: str | Path | None = None,
    simgrag: dict | None = None,
    safe: dict | None = None,
    gold: str = "filtered",
    max_chains: int = 3,
    ks: Sequence[int] = KS,
    limit: int | None = None,
    title: str | None = None,
) -> dict[str, Any]:
    from gsr_train.eval.results import MatchStats, read_results
    from gsr_train.kg.index import default_cache_dir, get_index
    from gsr_train.kg.paths import get_supervision
    from gsr_train.patterns.retrieve import subgraph_scores, write_pattern_results
    from gsr_train.patterns.sources import SourceStats, chain_patterns_from_results, gold_patterns
    from gsr_train.retrievers.cosine import cosine_scores
    from gsr_train.retrievers.safe import SAFEConfig, SchemaResources, safe_retrieve
    from gsr_train.retrievers.simgrag import SimGRAGConfig, simgrag_retrieve
    from gsr_train.text.embeddings import get_embeddings
    from gsr_train.text.encoders import load_encoder

    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    data_dir = resolve_data(data, cache_dir)
    from gsr_train.eval.evaluate import index_splits

    index = get_index(data_dir, splits=index_splits(data_dir, split_name), cache_dir=cache_dir)
    enc = load_encoder(encoder)
    emb = get_embeddings(index, enc, cache_dir, splits=[split_name])
    split = index[split_name]
    n_q = len(split) if limit is None else min(limit, len(split))
    sim_cfg = SimGRAGConfig.from_mapping(simgrag or {})
    safe_cfg = SAFEConfig.from_mapping(safe or {})
    out = Path(out) if out is not None else None
    rows: list[dict] = []
    info: dict[str, Any] = {
        "data": data_dir,
        "split": split_name,
        "questions": n_q,
        "encoder": enc.name,
        "simgrag": vars(sim_cfg),
        "safe": vars(safe_cfg),
        "gold_chains": gold,
        "max_chains": max_chains,
    }

    def add(method: str, scores: torch.Tensor, ms: float | None, timing: str, **extra) -> None:
        row = {
            "method": method,
            "answer_recall": _recall(split, scores, ks, limit),
            "triples": round(_mean_retrieved(split, scores, max(ks), limit), 1),
            "ms_per_question": None if ms is None else round(ms, 2),
            "timing": timing,
            **extra,
        }
        rows.append(row)
        log.info("%s: %s", method, row)

    def cut(pats):
        return [p if q < n_q else [] for q, p in enumerate(pats)]

    # cosine (measured)
    t0 = time.perf_counter()
    cos = cosine_scores(split, emb.question[split_name], emb)
    add("cosine", cos, 1000 * (time.perf_counter() - t0) / len(split), "measured (whole split)")
    # SubgraphRAG
    if subgraphrag_results:
        st = MatchStats()
        sg_scores, _ = read_results(subgraphrag_results, index, split_name, skip_unknown=True, stats=st)
        ms, how = None, "not measured"
        if subgraphrag_ckpt:
            from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever

            retr = SubgraphRAGRetriever.from_checkpoint(subgraphrag_ckpt)
            t0 = time.perf_counter()
            retr.retrieve(index, split_name, emb)
            ms, how = 1000 * (time.perf_counter() - t0) / len(split), "measured (whole split, from checkpoint)"
        add("SubgraphRAG", sg_scores, ms, how, file=str(subgraphrag_results), match=st.to_dict())
    # GSR
    gsr_pats = None
    if gsr_results:
        st = MatchStats()
        gsr_scores, _ = read_results(gsr_results, index, split_name, skip_unknown=True, stats=st)
        ms, how = None, "not measured"
        if gsr_metrics:
            m = json.loads(Path(gsr_metrics).read_text())
            un = m.get("unconstrained", {})
            n_eval = un.get("answer_coverage", {}).get("questions") or m.get("data", {}).get("eval_questions")
            if un.get("inference_seconds") and n_eval:
                ms, how = 1000 * un["inference_seconds"] / n_eval, "from GSR metrics (beam decoding + execution)"
        add("GSR", gsr_scores, ms, how, file=str(gsr_results), match=st.to_dict())
        sstats = SourceStats()
        gsr_pats = cut(
            chain_patterns_from_results(gsr_results, index, split_name, max_chains, sstats, skip_unknown=True)
        )
        info["gsr_patterns"] = sstats.to_dict()
    sup = get_supervision(index, split_name, cache_dir)
    gstats = SourceStats()
    gold_pats = cut(
        gold_patterns(
            index, split_name, sup.chains_filtered if gold == "filtered" else sup.chains_raw, max_chains, gstats
        )
    )
    info["gold_patterns"] = gstats.to_dict()
    t0 = time.perf_counter()
    resources = SchemaResources.build(index, list(index.splits), enc, cache_dir, safe_cfg)
    info["schema"] = {
        "types": len(resources.schema.types),
        "edges": len(resources.schema),
        "build_seconds": round(time.perf_counter() - t0, 2),
    }
    for source, pats in (("GSR chains", gsr_pats), ("gold chains", gold_pats)):
        if pats is None:
            continue
        tag = "gsr" if source == "GSR chains" else "gold"
        run = simgrag_retrieve(index, split_name, emb, pats, sim_cfg, enc, cache_dir)
        run.seconds = run.seconds[:n_q]
        if out is not None:
            write_pattern_results(out / f"simgrag_{tag}_{split_name}.jsonl", index, split_name, run, f"simgrag-{tag}")
        add(
            f"SimGRAG ({source})",
            subgraph_scores(split, run.subgraphs),
            1000 * sum(run.seconds) / n_q,
            "measured (cost tables + search)",
            summary=run.summary(),
        )
        run, astats = safe_retrieve(index, split_name, emb, pats, safe_cfg, enc, cache_dir, resources)
        run.seconds = run.seconds[:n_q]
        if out is not None:
            write_pattern_results(out / f"safe_{tag}_{split_name}.jsonl", index, split_name, run, f"safe-{tag}")
        add(
            f"SAFE ({source})",
            subgraph_scores(split, run.subgraphs),
            1000 * sum(run.seconds) / n_q,
            "measured (join + cost tables + search)",
            summary=run.summary(),
            join=astats.to_dict(),
        )
    table = markdown(rows, ks, f"{title or f'{Path(str(data_dir)).name} [{split_name}]'}, {n_q} questions")
    result = {**info, "rows": rows, "table": table}
    if out is not None:
        write_json(out / "comparison.json", result)
        with atomic_write(out / "comparison.md", "w") as f:
            f.write(table + "\n")
    return result


def markdown(rows: Sequence[dict], ks: Sequence[int], title: str) -> str:
    head = ["method"] + [f"ans@{k}" for k in ks] + ["triples", "ms/question"]
    lines = [
        f"**{title}**: answer recall@K, mean retrieved triples (capped at {max(ks)}), retrieval time",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        ms = "n/a" if r["ms_per_question"] is None else f"{r['ms_per_question']:.1f}"
        lines.append(
            "| "
            + " | ".join(
                [r["method"]] + [f"{r['answer_recall'][str(k)]:.3f}" for k in ks] + [f"{r['triples']:.1f}", ms]
            )
            + " |"
        )
    return "\n".join(lines)


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
    ap = argparse.ArgumentParser(prog="python -m gsr_train.runs.pattern_compare", description=__doc__.split("\n")[0])
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
