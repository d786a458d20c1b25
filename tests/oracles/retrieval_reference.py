"""Slow, obviously-correct reference for :func:`gsr_train.eval.retrieval.retrieval_metrics` (tests and
bench/bench_metrics.py only): per question, sorted lists and Python sets, no batching."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from gsr_train.eval.retrieval import HOP_GROUPS, METRICS, TOPIC_GROUPS, _check_ks
from gsr_train.kg.index import SplitGraphs


def reference_metrics(
    split: SplitGraphs,
    scores: torch.Tensor,
    ks: Sequence[int],
    sp_label: torch.Tensor | None = None,
    labelled: torch.Tensor | None = None,
    labelled_questions: torch.Tensor | None = None,
    hops: torch.Tensor | None = None,
) -> dict:
    """The metric definitions written as a plain per-question loop over Python lists and sets.

    Slow on purpose: tests and ``bench/bench_metrics.py`` check :func:`retrieval_metrics`
    against it. Returns the same structure as ``RetrievalReport.to_dict()`` (without meta).
    """
    ks = _check_ks(ks)
    s_all = scores.double().tolist()
    sp = sp_label.tolist() if sp_label is not None else None
    lab = labelled.tolist() if labelled is not None else None
    lq = labelled_questions.tolist() if labelled_questions is not None else None
    eptr, nptr = split.edge_ptr.tolist(), split.ent_ptr.tolist()
    heads, tails = split.edge_index[0].tolist(), split.edge_index[1].tolist()
    answer, topic = split.answer_mask.tolist(), split.topic_mask.tolist()
    per_q: dict[str, list] = {m: [] for m in METRICS}
    for i in range(len(split)):
        e0, e1 = eptr[i], eptr[i + 1]
        edges = [e for e in range(e0, e1) if s_all[e] != -math.inf]
        edges.sort(key=lambda e: (-s_all[e], e))
        answers = {n for n in range(nptr[i + 1] - nptr[i]) if answer[nptr[i] + n]}
        sp_pos = {e for e in range(e0, e1) if sp[e]} if sp is not None else set()
        lab_pos = {e for e in range(e0, e1) if lab[e]} if lab is not None else set()
        if lq is not None and not lq[i]:
            lab_pos = set()
        row: dict[str, list[float] | None] = {m: None for m in METRICS}
        for m, pos in (("sp_recall", sp_pos), ("labelled_recall", lab_pos)):
            if pos:
                row[m] = [len(pos & set(edges[:k])) / len(pos) for k in ks]
        if answers:
            vals = []
            for k in ks:
                covered = {heads[e] for e in edges[:k]} | {tails[e] for e in edges[:k]}
                vals.append(len(answers & covered) / len(answers))
            row["answer_recall"] = vals
        for m in METRICS:
            per_q[m].append(row[m])
    given = {"sp_recall": sp, "labelled_recall": lab, "answer_recall": True}
    present = [m for m in METRICS if given[m] is not None]

    def summarise(members: list[int]) -> dict:
        overall, counts = {}, {}
        for m in present:
            vals = [per_q[m][i] for i in members if per_q[m][i] is not None]
            counts[m] = len(vals)
            overall[m] = {str(k): (sum(v[j] for v in vals) / len(vals) if vals else None) for j, k in enumerate(ks)}
        return {"questions": len(members), "overall": overall, "counts": counts}

    everyone = list(range(len(split)))
    top = summarise(everyone)
    out = {
        "ks": ks,
        "questions": len(split),
        "overall": top["overall"],
        "counts": top["counts"],
        "by_hops": {},
        "by_topics": {},
    }
    if hops is not None:
        h = hops.tolist()
        name = {0: "0", 1: "1", 2: "2"}
        groups = [("no path" if x < 0 else name.get(x, ">=3")) for x in h]
        for g in HOP_GROUPS:
            members = [i for i in everyone if groups[i] == g]
            if members:
                out["by_hops"][g] = summarise(members)
    n_topics = [sum(topic[nptr[i] : nptr[i + 1]]) for i in everyone]
    for g in TOPIC_GROUPS:
        members = [i for i in everyone if {0: "0", 1: "1"}.get(n_topics[i], ">=2") == g]
        if members:
            out["by_topics"][g] = summarise(members)
    return out
