"""QA metrics of KG-RAG readers: Hit, Hit@1, Macro-/Micro-F1, precision, recall, Score_h.

Answer normalisation lives here and only here (`normalize_answer`): the reader's
answer parsing and every metric use it, so "The Beatles." and "beatles" always agree.

Definitions (per question, then averaged; see REFERENCE.md and SubgraphRAG app. C):

* predicted answers are de-duplicated after normalisation, gold answers likewise;
* a predicted answer is correct when its normalised form equals a normalised gold answer;
* ``precision`` = correct predictions / predictions (0 without predictions),
  ``recall`` = gold answers found / gold answers, ``f1`` their harmonic mean (0 if both 0);
  Macro-F1 is the mean of the per-question F1, Micro-F1 the F1 of the summed counts;
* ``hit``: some gold answer occurs (whole words, normalised) in the full response text;
* ``hit@1``: the first predicted answer is correct;
* ``Score_h``: questions whose answer entity is in the KG score +1 per correct and -1 per
  wrong predicted answer (0 when nothing is predicted); questions whose answer is absent from
  the KG score +1 for no answer, -1 per answer found among the retrieved entities and -1.5
  per answer not among them; each question's score is divided by its number of predicted
  answers and averaged. The mean is min-max normalised to 0..100 between the worst average
  the question set allows (-1 per in-KG question, -1.5 per absent one) and the best (+1).

The "-sub" view keeps the questions whose answer entity is in the graph. Reports break
every metric down by hop count (-1 = no path). Everything is per-question numpy arrays, so
the full-set, -sub and per-hop views are masks over the same arrays.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gsr_train.eval.intervals import QuestionValues, format_estimate

METRICS = ("hit", "hit@1", "macro_f1", "micro_f1", "precision", "recall", "score_h")

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation + "‘’“”–—"})


def normalize_answer(text: str) -> str:
    """Lower case, unicode NFKC, punctuation to spaces, articles dropped, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", str(text)).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def normalize_set(answers: Iterable[str]) -> list[str]:
    """Normalised, non-empty, de-duplicated answers in their first-seen order."""
    return list(dict.fromkeys(a for a in (normalize_answer(x) for x in answers) if a))


def contains_answer(response: str, answer: str) -> bool:
    """Whether the normalised ``answer`` occurs as whole words in the normalised ``response``."""
    a, r = normalize_answer(answer), normalize_answer(response)
    return bool(a) and f" {a} " in f" {r} "


@dataclass
class QAExample:
    """What the metrics need of one question."""

    id: str
    predictions: list[str]  # parsed answers, in the reader's order
    gold: list[str]  # gold answer names
    response: str = ""  # raw reader output (Hit looks here)
    in_kg: bool = True  # some answer entity occurs in the question's graph
    hops: int = -1  # shortest topic -> answer hop count, -1 none
    retrieved_entities: Sequence[str] = ()  # entities of the evidence shown (Score_h, absent answers)


@dataclass
class QAReport:
    """Per-question arrays plus the aggregated views (full, -sub, per hop)."""

    ids: list[str]
    arrays: dict[str, np.ndarray]
    in_kg: np.ndarray
    hops: np.ndarray
    summary: dict[str, dict] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return self.summary

    def flat(self, view: str = "all") -> dict[str, float]:
        return dict(self.summary[view]["metrics"])

    def question_values(self, view: str = "all") -> QuestionValues:
        """The per-question parts of every metric of ``view`` (``all``, ``sub``, ``hop=<h>``)."""
        if view == "all":
            mask = np.ones(len(self.ids), dtype=bool)
        elif view == "sub":
            mask = self.in_kg
        else:
            mask = self.hops == int(view.split("=", 1)[1])
        return question_values(self.ids, self.arrays, self.in_kg, mask)

    def table(self, title: str = "") -> str:
        head = f"{'view':<10} {'n':>5} " + " ".join(f"{m:>{CELL}}" for m in METRICS)
        lines = ([title] if title else []) + [head]
        for view, item in self.summary.items():
            lines.append(f"{view:<10} {item['n']:>5} {_cells(item)}")
        return "\n".join(lines)


CELL = 20  # width of a figure and its interval: ' 76.60 (72.1-81.0)'


def _cells(item: Mapping) -> str:
    """A view's figures in percent (Score_h as it is), each with its interval."""
    bounds = item.get("intervals") or {}
    cells = []
    for m, v in item["metrics"].items():
        low, high = bounds.get(m) or (None, None)
        cells.append(f"{format_estimate(v, low, high, 2, 1 if m == 'score_h' else 100):>{CELL}}")
    return " ".join(cells)


def score_question(ex: QAExample) -> dict[str, float]:
    """All per-question quantities (counts for Micro-F1 included)."""
    pred = normalize_set(ex.predictions)
    gold = normalize_set(ex.gold)
    gold_set = set(gold)
    correct = [p in gold_set for p in pred]
    n_correct = sum(correct)
    found = len(gold_set.intersection(pred))
    precision = n_correct / len(pred) if pred else 0.0
    recall = found / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    text = ex.response if ex.response else "\n".join(ex.predictions)
    hit = float(any(contains_answer(text, g) for g in gold))
    hit1 = float(bool(pred) and correct[0])
    if ex.in_kg:
        s = (n_correct - (len(pred) - n_correct)) / len(pred) if pred else 0.0
    elif not pred:
        s = 1.0
    else:
        shown = set(normalize_set(ex.retrieved_entities))
        s = sum(-1.0 if p in shown else -1.5 for p in pred) / len(pred)
    return {
        "hit": hit,
        "hit@1": hit1,
        "f1": f1,
        "precision": precision,
        "recall": recall,
        "h": s,
        "n_pred": len(pred),
        "n_correct": n_correct,
        "n_gold": len(gold),
        "n_found": found,
    }


def question_values(
    ids: Sequence[str], a: Mapping[str, np.ndarray], in_kg: np.ndarray, mask: np.ndarray
) -> QuestionValues:
    """Every metric of the questions in ``mask`` as per-question parts: the means, Micro-F1 from the
    counts, and Score_h as ``sum(100 (h - worst)) / sum(1 - worst)`` (its min-max normalisation)."""
    m = {k: v[mask] for k, v in a.items()}
    worst = np.where(in_kg[mask], -1.0, -1.5)
    out = QuestionValues([q for q, keep in zip(ids, mask.tolist()) if keep])
    for name, key in (("hit", "hit"), ("hit@1", "hit@1"), ("macro_f1", "f1"), ("precision", "precision")):
        out.add_mean(name, m[key])
    out.add_f1("micro_f1", m["n_correct"], m["n_pred"], m["n_found"], m["n_gold"])
    out.add_mean("recall", m["recall"])
    return out.add_ratio("score_h", 100.0 * (m["h"] - worst), 1.0 - worst)


def _aggregate(ids: Sequence[str], a: Mapping[str, np.ndarray], in_kg: np.ndarray, mask: np.ndarray) -> dict:
    """A view's figures and their 95% bootstrap intervals (``intervals``: ``{metric: [low, high]}``)."""
    item = _figures(a, in_kg, mask)
    if item["n"]:
        bounds = question_values(ids, a, in_kg, mask).intervals()
        item["intervals"] = {k: list(b) for k, b in bounds.items() if b is not None}
    return item


def _figures(a: Mapping[str, np.ndarray], in_kg: np.ndarray, mask: np.ndarray) -> dict:
    n = int(mask.sum())
    if n == 0:
        return {"n": 0, "metrics": {m: 0.0 for m in METRICS}}
    m = {k: v[mask] for k, v in a.items()}
    p_micro = m["n_correct"].sum() / max(m["n_pred"].sum(), 1)
    r_micro = m["n_found"].sum() / max(m["n_gold"].sum(), 1)
    micro = 2 * p_micro * r_micro / (p_micro + r_micro) if p_micro + r_micro else 0.0
    lo = np.where(in_kg[mask], -1.0, -1.5).mean()
    score_h = 100.0 * (m["h"].mean() - lo) / (1.0 - lo)
    return {
        "n": n,
        "metrics": {
            "hit": float(m["hit"].mean()),
            "hit@1": float(m["hit@1"].mean()),
            "macro_f1": float(m["f1"].mean()),
            "micro_f1": float(micro),
            "precision": float(m["precision"].mean()),
            "recall": float(m["recall"].mean()),
            "score_h": float(score_h),
        },
    }


def qa_metrics(examples: Sequence[QAExample]) -> QAReport:
    """Score every question and aggregate: ``all``, ``sub`` (answer in graph), ``hop=<h>``."""
    rows = [score_question(ex) for ex in examples]
    keys = ("hit", "hit@1", "f1", "precision", "recall", "h", "n_pred", "n_correct", "n_gold", "n_found")
    arrays = {k: np.asarray([r[k] for r in rows], dtype=np.float64).reshape(-1) for k in keys}
    in_kg = np.asarray([bool(ex.in_kg) for ex in examples], dtype=bool)
    hops = np.asarray([int(ex.hops) for ex in examples], dtype=np.int64)
    everything = np.ones(len(examples), dtype=bool)
    ids = [str(ex.id) for ex in examples]
    summary = {"all": _aggregate(ids, arrays, in_kg, everything), "sub": _aggregate(ids, arrays, in_kg, in_kg)}
    for h in sorted(set(hops.tolist())):
        summary[f"hop={h}"] = _aggregate(ids, arrays, in_kg, hops == h)
    return QAReport(ids, arrays, in_kg, hops, summary)


def comparison_table(reports: Mapping[str, QAReport], view: str = "all") -> str:
    """One line per named report (e.g. reader x evidence), percentages except Score_h."""
    width = max([len(n) for n in reports] + [8])
    lines = [f"{'reader':<{width}} {'n':>5} " + " ".join(f"{m:>{CELL}}" for m in METRICS)]
    for name, rep in reports.items():
        item = rep.summary[view]
        lines.append(f"{name:<{width}} {item['n']:>5} {_cells(item)}")
    return "\n".join(lines)
