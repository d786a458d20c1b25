"""The open-ended evaluation of OKGQA, end to end: questions -> evidence in a retrieval form (or none)
-> long-form answers -> atomic facts -> two verifiers against the KG -> FActScore, the hallucination
ratio, verifier agreement and G-Eval, per condition.

A *condition* is a retrieval form on a split (the original one, or a perturbed copy in the
OKGQA-P grid); every condition's answers are judged against the same knowledge source: by
default the question's *original* graph verbalised (``knowledge: graph``), else the evidence the
reader saw (``evidence``) or the lines of a user's text file. The encoder verifier calls a fact
supported when its support reaches the threshold calibrated on true and perturbed KG facts
(`gsr_train.openended.calibration`); the LLM judge when its probability of "True" is at least
0.5. Facts a judge could not read are counted and left out of that judge's figures.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gsr_train.eval.fact_check import EncoderVerifier, Knowledge, agreement, closest_lines, factscore, graph_lines
from gsr_train.eval.intervals import QuestionValues
from gsr_train.kg.index import KGIndex, SplitGraphs
from gsr_train.llm.client import ChatClient
from gsr_train.llm.usage import UsageStats
from gsr_train.openended import stages
from gsr_train.openended.forms import evidence_text, form_scores, results_lines
from gsr_train.openended.stages import Case, GEvalOptions

log = logging.getLogger(__name__)


@dataclass
class JudgeOptions:
    """How answers are read and judged (the ``open_ended`` section's knobs)."""

    top_k: int = 30  # evidence edges per prompt
    answer_tokens: int = 160
    fact_tokens: int = 96
    max_facts: int = 10
    facts: str = "llm"  # llm (each sentence broken into atomic facts by the LLM) | sentences
    answer_params: dict = field(default_factory=dict)  # extra fields of the answer requests
    knowledge: str = "graph"  # graph | evidence | <text file>
    encoder_candidates: int = 32  # lines the encoder verifier compares a fact with
    llm_lines: int = 10  # lines the LLM judge sees per fact
    verifiers: Sequence[str] = ("encoder", "llm")
    gamma: int = 10  # FActScore's length penalty
    geval: GEvalOptions = field(default_factory=GEvalOptions)


@dataclass
class Questions:
    """The questions under study and the graph each one is about (a subset of one split)."""

    ids: list[str]
    texts: list[str]
    graph_ids: list[str]
    split: SplitGraphs  # graph i belongs to question i
    embeddings: torch.Tensor  # the questions' texts, encoded (classic retrievers rank against them)


@dataclass
class Condition:
    label: str
    form: str  # none | triplets | paths | subgraphs | a results label
    split: SplitGraphs  # the graphs the reader's evidence comes from (original or perturbed)


@dataclass
class Judges:
    """The LLM endpoint (one client per stage so each stage's usage is counted apart, one cache) and
    the encoder verifier with its calibrated threshold."""

    llm: Mapping[str, Any]
    cache: Any
    verifier: EncoderVerifier | None
    threshold: float | None
    usage: dict[str, dict] = field(default_factory=dict)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[ChatClient]:
        """A client for one stage (its own usage counts, the shared cache); its usage is added to
        ``usage[name]`` when the stage ends."""
        cfg = dict(self.llm)
        stats = UsageStats(float(cfg.get("price_input_per_m") or 0.0), float(cfg.get("price_output_per_m") or 0.0))
        client = ChatClient(cfg, stats=stats, cache=self.cache)
        try:
            yield client
        finally:
            total = self.usage.setdefault(name, {})
            for k, v in client.stats.to_dict().items():
                if isinstance(v, (int, float)) and not k.endswith("per_fresh_request"):
                    total[k] = round(total.get(k, 0) + v, 6)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


def make_cases(
    qs: Questions, cond: Condition, index: KGIndex, emb, opts: JudgeOptions, classic: Mapping | None, results: Mapping
) -> list[Case]:
    """Each question's evidence in the condition's form (scored on the condition's graphs)."""
    if cond.form == "none":
        lines: list[list[str]] = [[] for _ in qs.ids]
    elif cond.form in results:
        lines = [results_lines(results[cond.form], g, opts.top_k) for g in qs.graph_ids]
    else:
        scores = form_scores(cond.split, qs.embeddings, emb, cond.form, classic)
        lines = [
            evidence_text(cond.split, i, scores, cond.form, opts.top_k, index.entities, index.relations)
            for i in range(len(qs.ids))
        ]
    return [Case(f"{qid}|{cond.label}", text, ev) for qid, text, ev in zip(qs.ids, qs.texts, lines)]


def graph_knowledge(qs: Questions, index: KGIndex) -> list[Knowledge]:
    """Each question's original graph as knowledge lines, built once per graph: the calibration and
    the judging of every condition read the same sources."""
    by_graph: dict[str, Knowledge] = {}
    for i, g in enumerate(qs.graph_ids):
        if g not in by_graph:
            by_graph[g] = Knowledge(graph_lines(qs.split, i, index.entities, index.relations))
    return [by_graph[g] for g in qs.graph_ids]


def knowledge_sources(mode: str, graphs: list[Knowledge]) -> list[Knowledge] | None:
    """One source per question: its original graph (``graphs``), a text file's lines, or None (evidence)."""
    if mode == "evidence":
        return None
    if mode == "graph":
        return graphs
    path = Path(mode)
    if not path.is_file():
        raise FileNotFoundError(f"open_ended.knowledge={mode}: not graph, evidence or an existing text file")
    shared = Knowledge([x.strip() for x in path.read_text(encoding="utf-8").splitlines() if x.strip()])
    return [shared] * len(graphs)


def judge_conditions(
    groups: Mapping[str, Sequence[Case]], sources: Sequence[Knowledge] | None, judges: Judges, opts: JudgeOptions
) -> tuple[dict[str, dict], list[dict]]:
    """Answer, split, verify and rate every condition's cases; figures per condition, one row per case.

    Each stage asks for all conditions at once, so a server that batches requests (the local one)
    fills its batches; ``sources[i]`` is the knowledge of question ``i`` of every condition."""
    cases = [c for group in groups.values() for c in group]
    knowledge = [
        Knowledge(c.evidence) if sources is None else sources[i]
        for group in groups.values()
        for i, c in enumerate(group)
    ]
    counts: dict[str, Counter] = {}
    with judges.stage("answer") as client:
        counts["answer"] = stages.answer(client, cases, opts.answer_tokens, opts.answer_params)
    with judges.stage("facts") as client:
        counts["facts"] = stages.split_facts(client, cases, opts.fact_tokens, opts.max_facts, opts.facts)
    pairs = [(ci, fi) for ci, c in enumerate(cases) for fi in range(len(c.facts))]
    enc = _encoder_verdicts(cases, knowledge, pairs, judges, opts)
    llm, counts["verify_llm"] = _llm_verdicts(cases, knowledge, pairs, judges, opts)
    with judges.stage("geval") as client:
        ratings, counts["geval"] = stages.geval(client, cases, opts.geval)
    figures, rows = {}, []
    for label in groups:
        own = [i for i, c in enumerate(cases) if stages.condition_of(c.key) == label]
        at = {ci: k for k, ci in enumerate(own)}
        js = [j for j, (ci, _) in enumerate(pairs) if ci in at]
        sub = (
            [cases[i] for i in own],
            [(at[pairs[j][0]], pairs[j][1]) for j in js],
            None if enc is None else enc[js],
            None if llm is None else [llm[j] for j in js],
            {k: p for k, p in ratings.items() if stages.condition_of(k[0]) == label},
        )
        figures[label] = _figures(*sub, judges.threshold, opts)
        figures[label]["counts"] = {
            stage: {r: n for (cond, r), n in c.items() if cond == label} for stage, c in counts.items()
        }
        rows += _rows(*sub, judges.threshold, opts)
    return figures, rows


def _encoder_verdicts(cases, knowledge, pairs, judges: Judges, opts: JudgeOptions) -> np.ndarray | None:
    """The encoder verifier's support of every ``(case, fact)`` pair against its case's knowledge."""
    if "encoder" not in opts.verifiers or judges.verifier is None or judges.threshold is None:
        return None
    facts = [cases[ci].facts[fi] for ci, fi in pairs]
    return judges.verifier.support(facts, [knowledge[ci] for ci, _ in pairs]) if facts else np.zeros(0)


def _llm_verdicts(cases, knowledge, pairs, judges: Judges, opts: JudgeOptions) -> tuple[list | None, Counter]:
    """The LLM judge's P(True) of every pair (None: unreadable, counted) over its closest lines."""
    if "llm" not in opts.verifiers:
        return None, Counter()
    facts = [cases[ci].facts[fi] for ci, fi in pairs]
    asks = [
        (f"{cases[ci].key}|fact{fi}", fact, closest_lines(fact, knowledge[ci], opts.llm_lines))
        for (ci, fi), fact in zip(pairs, facts)
    ]
    with judges.stage("verify_llm") as client:
        parsed, counts = stages.verify_llm(client, asks)
    return [p.value for p in parsed], counts


def _verdict_lists(cases, pairs, values, cut: float) -> list[list[bool]]:
    """Per answered case, the verdicts on its facts that a judge could read (``value >= cut``)."""
    out: list[list[bool]] = [[] for _ in cases]
    for (ci, _), v in zip(pairs, values):
        if v is not None:
            out[ci].append(bool(v >= cut))
    return [out[i] for i, c in enumerate(cases) if c.answer]


def _figures(cases, pairs, enc, llm, ratings, threshold: float | None, opts: JudgeOptions) -> dict:
    """FActScore and the hallucination ratio per verifier, their agreement, and the mean G-Eval ratings."""
    answered = [c for c in cases if c.answer]
    out: dict[str, Any] = {
        "cases": len(cases),
        "answered": len(answered),
        "mean_facts": _mean([len(c.facts) for c in answered]),
        "mean_answer_words": _mean([len(c.answer.split()) for c in answered]),
        "mean_evidence_lines": _mean([len(c.evidence) for c in cases]),
    }
    verdicts = {}
    if enc is not None:  # the continuous view: how close the facts come to the KG, whatever the threshold
        out["encoder_mean_support"] = _mean([float(v) for v in enc])
    for name, values, cut in (("encoder", enc, threshold), ("llm", llm, 0.5)):
        if values is None or cut is None:
            continue
        out[name] = factscore(_verdict_lists(cases, pairs, values, cut), opts.gamma)
        verdicts[name] = [None if v is None else bool(v >= cut) for v in values]
    if len(verdicts) == 2:
        both = [(a, b) for a, b in zip(verdicts["encoder"], verdicts["llm"]) if a is not None and b is not None]
        out["agreement"] = agreement([a for a, _ in both], [b for _, b in both])
    out["geval"] = {
        crit: _mean([p.value for (_, c), p in ratings.items() if c == crit]) for crit in opts.geval.criteria
    }
    out["geval_method"] = dict(Counter(p.method for p in ratings.values() if p.value is not None))
    bounds = case_values(cases, pairs, verdicts, ratings, opts).intervals()
    out["intervals"] = {name: list(b) for name, b in bounds.items() if b is not None}
    return out


def case_values(
    cases: Sequence[Case],
    pairs: Sequence[tuple[int, int]],
    verdicts: Mapping[str, Sequence[bool | None]],
    ratings: Mapping[tuple[str, str], Any],
    opts: JudgeOptions,
) -> QuestionValues:
    """The per-answer parts of a condition's headline figures (named as `report.values` names
    them), for their 95% bootstrap intervals over the condition's questions: FActScore with and without
    the length penalty (means over the answered cases with a readable fact), the hallucination ratio and
    the verifiers' agreement (ratios of fact counts) and each G-Eval criterion's mean rating."""
    n = len(cases)
    answered = np.asarray([bool(c.answer) for c in cases], dtype=bool)
    out = QuestionValues([c.key for c in cases])
    case_of = np.asarray([ci for ci, _ in pairs], dtype=np.int64)
    for name, vs in verdicts.items():
        read = np.asarray([v is not None for v in vs], dtype=bool) & answered[case_of] if len(vs) else np.zeros(0, bool)
        yes = np.asarray([bool(v) for v in vs], dtype=float) * read
        total = np.bincount(case_of, read.astype(float), minlength=n)
        supported = np.bincount(case_of, yes, minlength=n)
        share = np.where(total > 0, supported / np.maximum(total, 1), np.nan)
        g = float(opts.gamma)
        penalty = np.where((g > 0) & (total < g), np.exp(1 - g / np.maximum(total, 1)), 1.0)
        out.add_mean(f"factscore_{name}", share * penalty)
        out.add_mean(f"factscore_no_penalty_{name}", share)
        out.add_ratio(f"hallucination_{name}", total - supported, total)
    if len(verdicts) == 2:
        a, b = verdicts["encoder"], verdicts["llm"]
        both = np.asarray([x is not None and y is not None for x, y in zip(a, b)], dtype=float)
        same = np.asarray([x is not None and x == y for x, y in zip(a, b)], dtype=float) * both
        out.add_ratio(
            "verifier_agreement", np.bincount(case_of, same, minlength=n), np.bincount(case_of, both, minlength=n)
        )
    for crit in opts.geval.criteria:
        rated = [ratings.get((c.key, crit)) for c in cases]
        out.add_mean(f"geval_{crit}", [np.nan if p is None or p.value is None else float(p.value) for p in rated])
    return out


def _rows(cases, pairs, enc, llm, ratings, threshold: float | None, opts: JudgeOptions) -> list[dict]:
    """One row per case: the answer, its facts with each verifier's score, the unsupported facts, the ratings."""
    per_case: dict[int, list[dict]] = {}
    for j, (ci, fi) in enumerate(pairs):
        fact: dict[str, Any] = {"fact": cases[ci].facts[fi]}
        if enc is not None:
            fact["encoder_support"] = round(float(enc[j]), 4)
            fact["encoder_supported"] = None if threshold is None else bool(enc[j] >= threshold)
        if llm is not None:
            fact["llm_p_true"] = None if llm[j] is None else round(float(llm[j]), 4)
            fact["llm_supported"] = None if llm[j] is None else bool(llm[j] >= 0.5)
        per_case.setdefault(ci, []).append(fact)
    rows = []
    for ci, c in enumerate(cases):
        qid, _, condition = c.key.partition("|")
        facts = per_case.get(ci, [])
        rows.append(
            {
                "id": qid,
                "condition": condition,
                "question": c.question,
                "evidence": c.evidence,
                "answer": c.answer,
                "facts": facts,
                "unsupported": {
                    v: [f["fact"] for f in facts if f.get(f"{v}_supported") is False] for v in ("encoder", "llm")
                },
                "geval": {
                    crit: {"rating": p.value, "method": p.method, "reason": p.reason}
                    for (k, crit), p in ratings.items()
                    if k == c.key
                },
            }
        )
    return rows


def _mean(values) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None
