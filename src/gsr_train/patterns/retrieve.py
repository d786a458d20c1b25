"""Run a pattern retriever over a whole split and turn its subgraphs into the result format.

Both SimGRAG and SAFE reduce to: per question, for each of its patterns, build cost tables
over the question graph and call `gsr_train.patterns.search.topk_matches`; merge the
subgraphs of all patterns by distance (ties: round-robin over the patterns, so several
equally good chains all get their best subgraph in early), drop repeated edge sets, keep ``k``.
The merged list becomes per-edge scores (``-rank`` of the first subgraph holding the edge,
so readers and metrics see the triples in subgraph order) and one results row per question
with the subgraphs and patterns kept as extra fields.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from gsr_train.arrays import scatter
from gsr_train.eval.results import write_results
from gsr_train.kg.index import KGIndex, QuestionGraph, SplitGraphs
from gsr_train.patterns.pattern import Pattern
from gsr_train.patterns.search import LocalGraph, SearchStats, topk_matches

CostFn = Callable[[int, QuestionGraph, Pattern], tuple[list[np.ndarray], list[np.ndarray]]]


@dataclass
class Subgraph:
    distance: float
    pattern: int  # index into the question's pattern list
    edges: tuple[int, ...]  # question-local edge ids, one per pattern edge


@dataclass
class PatternRun:
    """Subgraphs per question plus what it cost."""

    subgraphs: list[list[Subgraph]]
    patterns: list[list[Pattern]]
    seconds: list[float]  # search wall time per question (cost tables + search)
    stats: SearchStats = field(default_factory=SearchStats)
    no_pattern: int = 0  # questions without any pattern
    no_match: int = 0  # questions with patterns but no matching subgraph
    truncated: int = 0  # searches stopped by max_partial

    def summary(self) -> dict:
        n = len(self.seconds)
        return {
            "questions": n,
            "no_pattern": self.no_pattern,
            "no_match": self.no_match,
            "truncated_searches": self.truncated,
            "ms_per_question": round(1000 * sum(self.seconds) / max(n, 1), 3),
            "partial_matches": self.stats.partial_matches,
            "pruned": self.stats.pruned,
            "mean_subgraphs": round(sum(len(s) for s in self.subgraphs) / max(n, 1), 2),
            "mean_triples": round(sum(len({e for g in s for e in g.edges}) for s in self.subgraphs) / max(n, 1), 2),
        }


def merge_subgraphs(found: Sequence[tuple[Subgraph, int]], k: int) -> list[Subgraph]:
    """The ``k`` best distinct subgraphs of all patterns; ``found``: (subgraph, its rank within its
    pattern). Equal distances go round-robin over the patterns (each pattern's best before any
    second best); a repeated edge set keeps its first place."""
    ordered = [s for s, _ in sorted(found, key=lambda x: (x[0].distance, x[1], x[0].pattern))]
    kept: list[Subgraph] = []
    seen: set[frozenset] = set()
    for s in ordered:
        key = frozenset(s.edges)
        if key not in seen:
            seen.add(key)
            kept.append(s)
        if len(kept) >= k:
            break
    return kept


def local_graph(g: QuestionGraph) -> LocalGraph:
    return LocalGraph.from_edges(g.edge_index.numpy(), g.edge_rel.numpy(), g.num_entities)


def retrieve_split(
    split: SplitGraphs,
    patterns: Sequence[Sequence[Pattern]],
    cost_fn: CostFn,
    k: int,
    prune: bool = True,
    max_partial: int | None = 2_000_000,
    extra_distance: Callable[[int, int], float] | None = None,
) -> PatternRun:
    """Top-``k`` distinct subgraphs per question over all its patterns.

    ``extra_distance(q, j)`` adds a per-pattern offset to every match of pattern ``j``
    (SAFE adds the schema-join distance of each aligned query graph).
    """
    if len(patterns) != len(split):
        raise ValueError(f"need one pattern list per question ({len(split)}), got {len(patterns)}")
    run = PatternRun([], [list(p) for p in patterns], [])
    for q in range(len(split)):
        t0 = time.perf_counter()
        found: list = []
        pats = patterns[q]
        if not pats:
            run.no_pattern += 1
        g = split.graph(q)
        if pats and g.num_edges:
            lg = local_graph(g)
            for j, pat in enumerate(pats):
                node_cost, rel_cost = cost_fn(q, g, pat)
                before = run.stats.partial_matches
                stats = SearchStats()
                matches = topk_matches(
                    lg,
                    [(e.head, e.tail) for e in pat.edges],
                    node_cost,
                    rel_cost,
                    k,
                    prune=prune,
                    stats=stats,
                    max_partial=max_partial,
                )
                run.stats.partial_matches = before + stats.partial_matches
                run.stats.pruned += stats.pruned
                run.stats.complete += stats.complete
                run.truncated += bool(max_partial is not None and stats.partial_matches > max_partial)
                offset = extra_distance(q, j) if extra_distance else 0.0
                found += [(Subgraph(m.distance + offset, j, m.edges), r) for r, m in enumerate(matches)]
        kept = merge_subgraphs(found, k)
        run.no_match += bool(pats) and not kept
        run.subgraphs.append(kept)
        run.seconds.append(time.perf_counter() - t0)
    return run


def subgraph_scores(split: SplitGraphs, subgraphs: Sequence[Sequence[Subgraph]]) -> torch.Tensor:
    """Per-edge scores: ``-(rank of the first subgraph holding the edge)``; others ``-inf``."""
    num_e = int(split.edge_ptr[-1]) if len(split) else 0
    scores = torch.full((num_e,), -math.inf, dtype=torch.float32)
    edge_pos, val = [], []
    for q, subs in enumerate(subgraphs):
        base = int(split.edge_ptr[q])
        for rank, s in enumerate(subs):
            for e in s.edges:
                edge_pos.append(base + e)
                val.append(-float(rank))
    if edge_pos:
        pos = torch.tensor(edge_pos)  # an edge in several subgraphs keeps its best rank; others stay -inf
        scores[pos] = scatter(torch.tensor(val), pos, 0, dim_size=num_e, reduce="max")[pos]
    return scores


def write_pattern_results(path: str | Path, index: KGIndex, split_name: str, run: PatternRun, method: str) -> int:
    """The project result file, plus ``subgraphs`` (distance, pattern, triples) and ``patterns``."""
    split = index[split_name]
    scores = subgraph_scores(split, run.subgraphs)
    ents, rels = index.entities, index.relations
    subs_field, pats_field = [], []
    for q, subs in enumerate(run.subgraphs):
        base = int(split.edge_ptr[q])
        rows = []
        for s in subs:
            t = split.global_edges_at(torch.tensor([base + e for e in s.edges], dtype=torch.long)).tolist()
            rows.append(
                {
                    "distance": round(s.distance, 6),
                    "pattern": s.pattern,
                    "triples": [[ents[h], rels[r], ents[tl]] for h, r, tl in t],
                }
            )
        subs_field.append(rows)
        pats_field.append([p.to_dict() for p in run.patterns[q]])
    k = max(1, max((sum(len(s.edges) for s in subs) for subs in run.subgraphs), default=1))
    return write_results(
        path,
        index,
        split_name,
        scores,
        k,
        extra={"method": [method] * len(split), "subgraphs": subs_field, "patterns": pats_field},
    )
