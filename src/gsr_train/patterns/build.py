"""Patterns per question from a source block (``patterns=gold|gsr|llm``): the one place that
turns a pattern configuration into query graphs, for the SimGRAG / SAFE runs and for the
registered pattern retrievers alike."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from gsr_train.kg.index import KGIndex
from gsr_train.kg.paths import get_supervision
from gsr_train.llm.client import ChatClient
from gsr_train.patterns.llm import LLMPatternStats, llm_patterns
from gsr_train.patterns.sources import SourceStats, chain_patterns_from_results, gold_patterns

SOURCES = ("gold", "gsr", "llm")


def build_patterns(
    index: KGIndex,
    split: str,
    source: Mapping[str, Any],
    kind: str,
    cache_dir: str | Path,
    llm: Mapping[str, Any] | None = None,
) -> tuple[list, dict]:
    """``patterns[q]`` for every question of ``split`` (best first) and the statistics of their source.

    ``source``: ``{source: gold, chains: filtered|raw, max_chains}``, ``{source: gsr, results,
    max_chains, skip_unknown}`` or ``{source: llm, kind, system, user, limit}`` (with ``llm`` the
    endpoint); ``kind`` is the retriever's own pattern format (simgrag | safe)."""
    name = source.get("source")
    if name == "gold":
        sup = get_supervision(index, split, cache_dir)
        st = SourceStats()
        chains = sup.chains_filtered if source.get("chains", "filtered") == "filtered" else sup.chains_raw
        return gold_patterns(index, split, chains, int(source.get("max_chains", 3)), st), st.to_dict()
    if name == "gsr":
        if not source.get("results"):
            raise ValueError("patterns source 'gsr' needs results: a GSR results file (results_<split>.jsonl)")
        st = SourceStats()
        pats = chain_patterns_from_results(
            source["results"],
            index,
            split,
            int(source.get("max_chains", 3)),
            st,
            skip_unknown=bool(source.get("skip_unknown", False)),
        )
        return pats, st.to_dict()
    if name == "llm":
        if not llm:
            raise ValueError("patterns source 'llm' needs an llm endpoint (the llm config group)")
        sp = index[split]
        n = len(sp) if source.get("limit") is None else min(int(source["limit"]), len(sp))
        llm_st = LLMPatternStats()
        with ChatClient(dict(llm)) as client:
            pats = llm_patterns(
                client,
                list(zip(sp.ids[:n], sp.questions[:n])),
                source.get("kind") or kind,
                source.get("system"),
                source.get("user"),
                llm_st,
            )
            Console().print(client.stats.table("LLM usage (patterns)"), markup=False, highlight=False)
        return pats + [[] for _ in range(len(sp) - n)], llm_st.to_dict()
    raise ValueError(f"patterns.source must be one of {SOURCES}, got {name!r}")
