"""Metrics of chain retrievers (GSR): chain match, answer coverage, validity.

* **Ground-chain match @n**: over the questions with at least one ground chain, the share
  whose top-n beam outputs (*before* validity filtering) contain one of the ground chains.
* **End-equivalent match @n**: as above, but a beam also counts when it reaches, in the
  question's graph, exactly the entities a ground chain reaches (the same retrieval under
  another name, usually the inverse relation: ground chains name whichever of a relation
  pair the original graph happened to store). Needs the graphs; flags come from the retriever.
* **Answer coverage** of the retrieved subgraph: per question, the entity set of the
  retrieved triples ``E`` against the gold answers ``A`` (names, exact match):
  precision ``|E & A| / |E|`` (0 when nothing is retrieved), recall ``|E & A| / |A|``, F1;
  averaged over the questions that have answers. ``hits``: ``E & A`` non-empty.
* **Paper variant** (GSR's evaluation): the predicted entities are only the *end* entities
  of the kept valid chains; precision and recall are 0 when no answer is covered;
  ``f1`` is the mean of per-question F1 (the figure the paper's tables report),
  ``macro_f1`` is the F1 of the mean precision and mean recall.
* **Validity**: the share of returned beam chains that are executable from the topic
  entities (all beams, and the top-n beams), and the share of questions left with at
  least one valid chain.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gsr_train.eval.intervals import QuestionValues, format_cell
from gsr_train.eval.markdown import markdown_table

Chain = tuple[str, ...]


def chain_match(
    beams: Sequence[Sequence[Chain | None]], ground: Sequence[Iterable[Chain]], ns: Sequence[int] = (1, 3)
) -> dict:
    """``{"questions": q, "match@n": share}`` over questions with >= 1 ground chain."""
    if len(beams) != len(ground):
        raise ValueError(f"chain_match: {len(beams)} beam lists for {len(ground)} questions")
    grounds = [{tuple(c) for c in g} for g in ground]
    flags = [[c is not None and tuple(c) in gset for c in per_q] for per_q, gset in zip(beams, grounds)]
    return _hit_shares(flags, [bool(g) for g in grounds], ns, "match")


def end_match(
    equivalent: Sequence[Sequence[bool]], ground: Sequence[Iterable[Chain]], ns: Sequence[int] = (1, 3)
) -> dict:
    """``{"questions": q, "end_match@n": share}``: ``equivalent[i][j]`` says beam ``j`` of question
    ``i`` names a ground chain or reaches exactly a ground chain's end entities."""
    if len(equivalent) != len(ground):
        raise ValueError(f"end_match: {len(equivalent)} flag lists for {len(ground)} questions")
    return _hit_shares(equivalent, [any(True for _ in g) for g in ground], ns, "end_match")


def chain_match_values(
    ids: Sequence[str],
    beams: Sequence[Sequence[Chain | None]],
    ground: Sequence[Iterable[Chain]],
    ns: Sequence[int] = (1, 3),
    equivalent: Sequence[Sequence[bool]] | None = None,
) -> QuestionValues:
    """Per question, ``match@n`` (and with ``equivalent``, ``end_match@n``): 1 / 0, NaN for a question
    without a ground chain (not counted), for the bootstrap intervals of `chain_match` /
    `end_match`."""
    grounds = [{tuple(c) for c in g} for g in ground]
    flags = [[c is not None and tuple(c) in gset for c in per_q] for per_q, gset in zip(beams, grounds)]
    out = QuestionValues([str(q) for q in ids])
    for key, hits in (("match", flags), ("end_match", equivalent)):
        if hits is None:
            continue
        for n in ns:
            out.add_mean(f"{key}@{n}", [float(any(list(h)[:n])) if g else math.nan for h, g in zip(hits, grounds)])
    return out


def group_match_values(values: QuestionValues, groups: Mapping[str, Sequence[int]]) -> QuestionValues:
    """``<group>_match@n`` beside each ``match@n`` of ``values``: the group's questions (positions)
    counted, the others not (NaN), so a group's chain match gets its interval from the same resampling."""
    inside = {name: np.zeros(len(values), dtype=bool) for name in groups}
    for name, rows in groups.items():
        inside[name][list(rows)] = True
    for key, (_, block) in list(values.parts.items()):
        if not key.startswith("match@"):
            continue
        column = np.where(block[:, 1].numpy() > 0, block[:, 0].numpy(), math.nan)
        for name, keep in inside.items():
            values.add_mean(f"{name}_{key}", np.where(keep, column, math.nan))
    return values


def coverage_values(
    values: QuestionValues,
    positions: Sequence[int],
    retrieved: Sequence[Iterable[str]],
    ends: Sequence[Iterable[str]],
    answers: Sequence[Iterable[str]],
) -> QuestionValues:
    """The per-question parts of `answer_coverage` (``cov_*``) and `paper_coverage`
    (``paper_*``) added to ``values``: question ``positions[j]`` has ``retrieved[j]`` / ``ends[j]`` and
    gold ``answers[j]``; the rest are not counted. ``paper_macro_f1`` is the F1 of the mean precision
    and mean recall (an ``f1`` of per-question precisions over ones and recalls over ones)."""
    n = len(values)
    cov = np.full((n, 4), math.nan)
    paper = np.full((n, 4), math.nan)
    for at, ents, end, ans in zip(positions, retrieved, ends, answers):
        gold = set(ans)
        if gold:
            cov[at] = _prf(set(ents), gold)
        p, r, f, hit = _prf(set(end), gold)
        paper[at] = (p, r, f, hit) if hit else (0.0, 0.0, 0.0, 0.0)
    for j, name in enumerate(("precision", "recall", "f1", "hits")):
        values.add_mean(f"cov_{name}", cov[:, j])
        values.add_mean(f"paper_{name}", paper[:, j])
    counted = ~np.isnan(paper[:, 0])
    ones = counted.astype(float)
    values.add_f1("paper_macro_f1", np.nan_to_num(paper[:, 0]), ones, np.nan_to_num(paper[:, 1]), ones)
    return values


def _hit_shares(flags: Sequence[Sequence[bool]], counted: Sequence[bool], ns: Sequence[int], key: str) -> dict:
    """Share of the ``counted`` questions with a hit among their first ``n`` beams, per ``n``."""
    hits = {n: 0 for n in ns}
    count = 0
    for per_q, use in zip(flags, counted):
        if not use:
            continue
        count += 1
        per_q = list(per_q)
        for n in ns:
            hits[n] += any(per_q[:n])
    out: dict[str, float] = {"questions": count}
    out.update({f"{key}@{n}": (hits[n] / count if count else 0.0) for n in ns})
    return out


def _prf(pred: set, gold: set) -> tuple[float, float, float, bool]:
    cover = len(pred & gold)
    p = cover / len(pred) if pred else 0.0
    r = cover / len(gold) if gold else 0.0
    f = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return p, r, f, cover > 0


def answer_coverage(retrieved: Sequence[Iterable[str]], answers: Sequence[Iterable[str]]) -> dict:
    """Answer coverage of the retrieved entity sets (questions without answers are skipped)."""
    rows = []
    for ents, ans in zip(retrieved, answers):
        gold = set(ans)
        if not gold:
            continue
        rows.append(_prf(set(ents), gold))
    if not rows:
        return {"questions": 0, "precision": 0.0, "recall": 0.0, "f1": 0.0, "hits": 0.0}
    arr = np.asarray(rows, dtype=float)
    return {
        "questions": len(rows),
        "precision": float(arr[:, 0].mean()),
        "recall": float(arr[:, 1].mean()),
        "f1": float(arr[:, 2].mean()),
        "hits": float(arr[:, 3].mean()),
    }


def paper_coverage(end_entities: Sequence[Iterable[str]], answers: Sequence[Iterable[str]]) -> dict:
    """GSR's variant: end entities of the kept chains vs answers; P = R = 0 without a hit."""
    ps: list[float] = []
    rs: list[float] = []
    fs: list[float] = []
    hs: list[bool] = []
    for ends, ans in zip(end_entities, answers):
        gold, pred = set(ans), set(ends)
        cover = len(gold & pred)
        if cover:
            p, r = cover / len(pred), cover / len(gold)
            f = 2 * p * r / (p + r)
        else:
            p = r = f = 0.0
        ps.append(p)
        rs.append(r)
        fs.append(f)
        hs.append(cover > 0)
    if not ps:
        return {"questions": 0, "precision": 0.0, "recall": 0.0, "f1": 0.0, "macro_f1": 0.0, "hits": 0.0}
    mp, mr = float(np.mean(ps)), float(np.mean(rs))
    return {
        "questions": len(ps),
        "precision": mp,
        "recall": mr,
        "f1": float(np.mean(fs)),
        "macro_f1": 2 * mp * mr / (mp + mr) if mp + mr > 0 else 0.0,
        "hits": float(np.mean(hs)),
    }


def validity(valid_flags: Sequence[Sequence[bool]], top_n: int) -> dict:
    """Validity of the returned beams (per question, in beam order)."""
    total = sum(len(v) for v in valid_flags)
    top = [list(v)[:top_n] for v in valid_flags]
    total_top = sum(len(v) for v in top)
    return {
        "valid_fraction": (sum(sum(v) for v in valid_flags) / total) if total else 0.0,
        f"valid_fraction@{top_n}": (sum(sum(v) for v in top) / total_top) if total_top else 0.0,
        "questions_with_valid_chain": (sum(any(v) for v in valid_flags) / len(valid_flags)) if valid_flags else 0.0,
    }


@dataclass
class ChainReport:
    """All chain-retriever figures of one split, as nested dicts."""

    split: str
    match: dict = field(default_factory=dict)
    coverage: dict = field(default_factory=dict)
    paper: dict = field(default_factory=dict)
    valid: dict = field(default_factory=dict)
    groups: dict = field(default_factory=dict)  # name -> chain match over a subset of the questions
    ends: dict = field(default_factory=dict)  # end-equivalent match (when the graphs were there)
    extra: dict = field(default_factory=dict)
    questions: QuestionValues | None = None  # per-question chain match (`chain_match_values`)
    _intervals: dict[str, list[float]] | None = field(default=None, repr=False)

    @property
    def intervals(self) -> dict[str, list[float]]:
        """95% bootstrap interval over questions of every figure `questions` measures, by its
        `flat` name (``match@1``, ``seen_match@1``, ``cov_f1``, ``paper_f1``...); computed once."""
        if self._intervals is None:
            bounds = self.questions.intervals() if self.questions is not None else {}
            self._intervals = {name: list(b) for name, b in bounds.items() if b is not None}
        return self._intervals

    def to_dict(self) -> dict:
        return {
            "split": self.split,
            "intervals": self.intervals,
            "chain_match": self.match,
            "answer_coverage": self.coverage,
            "paper_coverage": self.paper,
            "validity": self.valid,
            "match_by_group": self.groups,
            "end_match": self.ends,
            **self.extra,
        }

    def flat(self) -> dict:
        out = {}
        for k, v in self.match.items():
            out[k if k.startswith("match") else f"match_{k}"] = v
        out.update({k: v for k, v in self.ends.items() if k != "questions"})
        for group, match in self.groups.items():
            out.update({f"{group}_{k}": v for k, v in match.items()})
        for k, v in self.coverage.items():
            out[f"cov_{k}"] = v
        for k, v in self.paper.items():
            out[f"paper_{k}"] = v
        out.update(self.valid)
        return out

    def table(self) -> str:
        bounds = self.intervals
        rows = [(k, format_cell(v, bounds.get(k), 4)) for k, v in self.flat().items()]
        width = max(len(k) for k, _ in rows) if rows else 0
        return "\n".join([f"GSR chain metrics [{self.split}]"] + [f"  {k:<{width}}  {v}" for k, v in rows])


def match_table(figures: Mapping[str, Any], modes: Sequence[str]) -> str:
    """Chain match per decoding mode (``figures[mode]``: a `ChainReport.to_dict`), each with its
    95% interval: all questions, those a closed vocabulary can match (a ground chain of relations seen in
    training chains) and those it cannot (they need an unseen relation)."""
    head = ["decoding", "questions", "match@1", "match@3", "seen", "seen match@1", "seen match@3", "unseen"]
    head += ["unseen match@1", "unseen match@3"]
    rows = []
    for mode in modes:
        r = figures[mode]
        bounds = r.get("intervals") or {}
        m, groups = r.get("chain_match") or {}, r.get("match_by_group") or {}
        cells = [mode, format_cell(m.get("questions"))]
        cells += [format_cell(m.get(k), bounds.get(k), 4) for k in ("match@1", "match@3")]
        for name in ("seen", "unseen"):
            group = groups.get(name) or {}
            cells.append(format_cell(group.get("questions")))
            cells += [format_cell(group.get(k), bounds.get(f"{name}_{k}"), 4) for k in ("match@1", "match@3")]
        rows.append(cells)
    return markdown_table(head, rows)


def chain_figures(report: Mapping[str, Any]) -> tuple[dict, dict]:
    """A decoding mode's row figures: chain match (with its seen / unseen groups and end-equivalent
    match) and answer coverage, and the labels that count its questions."""
    values = dict(report.get("chain_match") or {})
    labels = {"n": values.pop("questions", None)}  # a count: a label of the row, not a metric
    for group, match in (report.get("match_by_group") or {}).items():  # seen / unseen relations
        labels[f"{group}_n"] = match.get("questions")
        values.update({f"{group}_{k}": v for k, v in match.items() if k != "questions"})
    values.update({k: v for k, v in (report.get("end_match") or {}).items() if k != "questions"})
    coverage = (report.get("answer_coverage") or {}).items()
    values.update({f"cov_{m}": v for m, v in coverage if isinstance(v, (int, float)) and m != "questions"})
    return values, labels
