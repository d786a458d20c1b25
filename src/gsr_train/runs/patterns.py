"""Hydra runners of the pattern retrievers (``+experiment=simgrag`` / ``+experiment=safe``).

Each run builds the patterns (``patterns=gold|gsr|llm``), retrieves, writes
``retrieval_<split>.jsonl`` in the project result format (plus the subgraphs and patterns),
prints the recall table and saves ``results.json`` with the metrics, the retrieval time per
question and the pattern / search statistics.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


def build_patterns(cfg: DictConfig, index, split: str, kind: str) -> tuple[list, dict]:
    """Patterns per question from ``cfg.patterns`` and the statistics of their source."""
    from gsr_train.runs.common import cache_dir

    pc = cfg.patterns
    if pc.source == "gold":
        from gsr_train.kg.paths import get_supervision
        from gsr_train.patterns.sources import SourceStats, gold_patterns

        sup = get_supervision(index, split, cache_dir(cfg))
        st = SourceStats()
        chains = sup.chains_filtered if pc.get("chains", "filtered") == "filtered" else sup.chains_raw
        return gold_patterns(index, split, chains, int(pc.max_chains), st), st.to_dict()
    if pc.source == "gsr":
        from gsr_train.patterns.sources import SourceStats, chain_patterns_from_results

        st = SourceStats()
        pats = chain_patterns_from_results(pc.results, index, split, int(pc.max_chains), st,
                                           skip_unknown=bool(pc.get("skip_unknown", False)))
        return pats, st.to_dict()
    if pc.source == "llm":
        from gsr_train.llm.client import ChatClient
        from gsr_train.patterns.llm import LLMPatternStats, llm_patterns

        sp = index[split]
        n = len(sp) if pc.get("limit") is None else min(int(pc.limit), len(sp))
        st = LLMPatternStats()
        with ChatClient(OmegaConf.to_container(cfg.llm, resolve=True)) as client:
            pats = llm_patterns(client, list(zip(sp.ids[:n], sp.questions[:n])), pc.get("kind") or kind,
                                pc.get("system"), pc.get("user"), st)
            from rich.console import Console

            Console().print(client.stats.table("LLM usage (patterns)"))
        return pats + [[] for _ in range(len(sp) - n)], st.to_dict()
    raise ValueError(f"patterns.source must be gold, gsr or llm, got {pc.source!r}")


def _run(cfg: DictConfig, method: str) -> dict[str, Any]:
    from gsr_train.eval.labels import load_labelled_triples
    from gsr_train.eval.retrieval import retrieval_metrics
    from gsr_train.kg.paths import get_supervision
    from gsr_train.patterns.retrieve import subgraph_scores, write_pattern_results
    from gsr_train.runs.common import cache_dir, label_path, load_kg_index, output_dir, save_figures
    from gsr_train.text.embeddings import get_embeddings
    from gsr_train.text.encoders import load_encoder

    split = cfg.get("split", "test")
    index = load_kg_index(cfg)
    enc = load_encoder(OmegaConf.to_container(cfg.encoder, resolve=True))
    emb = get_embeddings(index, enc, cache_dir(cfg), splits=[split])
    patterns, source_stats = build_patterns(cfg, index, split, method)
    options = OmegaConf.to_container(cfg[method], resolve=True)
    extra: dict[str, Any] = {}
    t0 = time.perf_counter()
    if method == "simgrag":
        from gsr_train.retrievers.simgrag import simgrag_retrieve

        run = simgrag_retrieve(index, split, emb, patterns, options, enc, cache_dir(cfg))
    else:
        from gsr_train.retrievers.safe import safe_retrieve

        run, astats = safe_retrieve(index, split, emb, patterns, options, enc, cache_dir(cfg))
        extra["join"] = astats.to_dict()
    total = time.perf_counter() - t0
    graphs = index[split]
    out = output_dir(cfg) / f"retrieval_{split}.jsonl"
    name = f"{method}-{cfg.patterns.source}"
    write_pattern_results(out, index, split, run, name)
    scores = subgraph_scores(graphs, run.subgraphs)
    sup = get_supervision(index, split, cache_dir(cfg))
    labelled = labelled_questions = None
    if label_path(cfg, split):
        labelled, labelled_questions, _ = load_labelled_triples(label_path(cfg, split), index, split)
    report = retrieval_metrics(graphs, scores, list(cfg.eval_ks), sp_label=sup.triple_label, labelled=labelled,
                               labelled_questions=labelled_questions, hops=sup.hops)
    print(report.table(f"{name} on {cfg.data.name} [{split}]", breakdowns=True))
    summary = run.summary()
    print(f"{name}: {summary['ms_per_question']:.1f} ms/question, {summary['mean_subgraphs']} subgraphs and "
          f"{summary['mean_triples']} triples per question; {summary['no_pattern']} questions without a pattern")
    result = {"experiment": cfg.experiment_name, "method": name, "data": cfg.data.name, "split": split,
              "config": options, "patterns": source_stats, "search": summary, "total_seconds": round(total, 2),
              "results_path": str(out), "metrics": report.to_dict(), **extra}
    save_figures(cfg, "results.json", result)
    return result


def run_simgrag(cfg: DictConfig) -> dict[str, Any]:
    return _run(cfg, "simgrag")


def run_safe(cfg: DictConfig) -> dict[str, Any]:
    return _run(cfg, "safe")
