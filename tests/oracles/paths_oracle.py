"""Slow, obviously-correct reference for :mod:`gsr_train.kg.paths` (tests and benchmark only).

One networkx ``MultiDiGraph`` per question and ``nx.all_shortest_paths`` per (topic, answer)
pair in both directions, as the SubgraphRAG public code does, except that every parallel
edge between consecutive path nodes is labelled (the public code's ``DiGraph`` keeps one).
Needs ``networkx`` (a test extra, not a runtime dependency).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gsr_train.kg.index import SplitGraphs


@dataclass
class OracleResult:
    triple_label: torch.Tensor  # [sum E of the chosen questions] bool, in question order
    hops: torch.Tensor  # [len(questions)]
    chains_raw: list[set[tuple[int, ...]]] | None  # uncapped, only with chains=True
    chains_filtered: list[set[tuple[int, ...]]] | None


def _paths(nx, g, source, target):
    if source not in g or target not in g:
        return []
    try:
        return list(nx.all_shortest_paths(g, source, target))
    except nx.NetworkXNoPath:
        return []


def oracle_question(split: SplitGraphs, i: int, chains: bool = False):
    """Labels (local edge order), hops and (optionally) chain sets of question ``i``."""
    import networkx as nx

    q = split.graph(i)
    g = nx.MultiDiGraph()
    heads, tails = q.edge_index.tolist()
    rels = q.edge_rel.tolist()
    for e, (h, t) in enumerate(zip(heads, tails)):
        g.add_edge(h, t, key=e)
    topics = q.topic_mask.nonzero().flatten().tolist()
    answers = q.answer_mask.nonzero().flatten().tolist()
    label = torch.zeros(len(rels), dtype=torch.bool)
    best, topic_is_answer = None, False
    raw, filtered = set(), set()
    for s in topics:
        for a in answers:
            if s == a:
                topic_is_answer = True
                continue
            fwd, bwd = _paths(nx, g, s, a), _paths(nx, g, a, s)
            if fwd and bwd:
                shortest = min(len(fwd[0]), len(bwd[0]))
                fwd = [p for p in fwd if len(p) == shortest]
                bwd = [p for p in bwd if len(p) == shortest]
            for direction, paths in (("fwd", fwd), ("bwd", bwd)):
                for path in paths:
                    best = len(path) - 1 if best is None else min(best, len(path) - 1)
                    step_rels = []
                    for u, v in zip(path, path[1:]):
                        keys = list(g[u][v])
                        label[keys] = True
                        step_rels.append(sorted({rels[k] for k in keys}))
                    if chains:
                        if direction == "bwd":
                            step_rels = step_rels[::-1]
                        combos = set(itertools.product(*step_rels))
                        raw |= combos
                        if direction == "fwd":
                            filtered |= combos
    hops = best if best is not None else (0 if topic_is_answer else -1)
    return label, hops, raw, filtered


def oracle_supervision(
    split: SplitGraphs, questions: Sequence[int] | None = None, chains: bool = False
) -> OracleResult:
    """Reference labels / hops (/ uncapped chains) for the given questions of ``split``."""
    questions = range(len(split)) if questions is None else questions
    labels, hops, raws, filts = [], [], [], []
    for i in questions:
        label, h, raw, filtered = oracle_question(split, i, chains)
        labels.append(label)
        hops.append(h)
        raws.append(raw)
        filts.append(filtered)
    return OracleResult(
        triple_label=torch.cat(labels) if labels else torch.zeros(0, dtype=torch.bool),
        hops=torch.tensor(hops, dtype=torch.long),
        chains_raw=raws if chains else None,
        chains_filtered=filts if chains else None,
    )
