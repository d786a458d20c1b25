"""One QA scoreboard for prediction files of any KGQA system: ``gsr-train score FILE [FILE ...]``.

Papers count the same predictions differently, so this scores every file every way, side by side:

* formats: gsr-train readers (``predictions_<variant>.jsonl``: ``prediction`` a list of answers,
  ``answers``, ``response``), RoG / GNN-RAG (``prediction`` a string of lines or a list,
  ``ground_truth``), and SubgraphRAG-style responses whose answers are ``ans: X`` lines (taken
  from any string prediction that has them). A file in none of these is one error naming it.
* ``hit``: some gold answer is a substring of the joined predictions after RoG's normalisation
  (lower case, punctuation deleted, articles dropped): RoG's and GNN-RAG's "Hit", and what
  RoG's paper reports as "Hit@1" (any predicted answer counts).
* ``hit@1_first``: some gold answer is a substring of the *first* predicted answer (GNN-RAG's
  "Hit1"); ``hit@1``: the first predicted answer *equals* a gold answer (exact, after
  gsr-train's normalisation, `gsr_train.eval.qa.normalize_answer`): the strict one.
* ``macro_f1``, ``precision``, ``recall``: per question with exact matches (de-duplicated
  answers), then averaged; ``f1_of_means``: the F1 of the mean precision and mean recall.
* ``rog_f1`` / ``rog_precision`` / ``rog_recall``: RoG's evaluator: gold answers found as
  substrings of the joined predictions, over the number of predicted lines (precision) and of
  gold answers (recall; RoG's "Accuracy"), F1 per question, averaged. Kept as RoG computes it:
  one predicted line holding two gold answers is precision 2.0, so ``rog_precision`` can exceed
  100; ``precision`` is the bounded one.
* ``intervals``: each figure's 95% bootstrap interval over the file's questions
  (`gsr_train.eval.intervals`; the table prints ``75.00 (25.0-100.0)``).
* ``scored``, ``missing`` (ids of ``--data``'s split without a prediction), ``duplicates``.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gsr_train.data.rows import iter_records
from gsr_train.eval.intervals import QuestionValues, format_cell
from gsr_train.eval.markdown import markdown_table
from gsr_train.eval.qa import QAExample, normalize_answer, score_question
from gsr_train.io import BadLine, iter_jsonl

COLUMNS = (
    "hit",
    "hit@1_first",
    "hit@1",
    "macro_f1",
    "f1_of_means",
    "precision",
    "recall",
    "rog_f1",
    "rog_precision",
    "rog_recall",
)
_ROG_PUNCT = str.maketrans("", "", string.punctuation)
_ROG_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ANS = re.compile(r"^\s*ans:\s*", re.I)


INTERVALS = "intervals"  # a row's {figure: [low, high]}, 95% bootstrap over its questions


class PredictionFormatError(ValueError):
    """A prediction file (or row) in no format the scoreboard reads."""


@dataclass
class Prediction:
    id: str
    answers: list[str]  # the predicted answers, in order
    gold: list[str]
    response: str


def rog_normalize(text: str) -> str:
    """RoG's normalisation: lower case, punctuation deleted, articles and ``<pad>`` dropped."""
    text = str(text).lower().translate(_ROG_PUNCT)
    text = _ROG_ARTICLES.sub(" ", text.replace("<pad>", " "))
    return " ".join(text.split())


def _rog_match(text: str, answer: str) -> bool:
    return rog_normalize(answer) in rog_normalize(text)


def _lines(prediction: Any) -> list[str]:
    """The predicted answers of a string (lines; ``ans:`` lines when it has them) or a list (RoG's
    order for a list: most frequent first)."""
    if isinstance(prediction, list):
        counts = Counter(str(p) for p in prediction)
        return [p for p, _ in sorted(counts.items(), key=lambda item: item[1], reverse=True)]
    lines = str(prediction).strip().split("\n")
    tagged = [_ANS.sub("", line).strip() for line in lines if _ANS.match(line)]
    return tagged if tagged else lines


def parse_row(rec: Any, where: str) -> tuple[Prediction, str]:
    """One row of any known format, and the format's name."""
    if isinstance(rec, BadLine):
        raise PredictionFormatError(f"{where}: {rec}")
    if not isinstance(rec, dict) or "prediction" not in rec:
        keys = sorted(rec) if isinstance(rec, dict) else type(rec).__name__
        raise PredictionFormatError(
            f"{where}: not a prediction row (keys {keys}); expected 'prediction' with 'answers' "
            "(gsr-train) or 'ground_truth' (RoG / GNN-RAG)"
        )
    gold = rec.get("answers", rec.get("ground_truth"))
    if not isinstance(gold, list):
        raise PredictionFormatError(f"{where}: needs a list of gold answers in 'answers' or 'ground_truth'")
    blank = [g for g in gold if g is None or isinstance(g, (list, dict)) or (isinstance(g, float) and math.isnan(g))]
    if blank:  # NaN from a pandas export, null: not an answer no prediction could match
        field = "answers" if "answers" in rec else "ground_truth"
        raise PredictionFormatError(f"{where}: a gold answer in '{field}' is no text: {blank[0]!r}")
    qid = str(rec.get("id", where))
    pred = rec["prediction"]
    if "answers" in rec and isinstance(pred, list):
        return Prediction(qid, [str(p) for p in pred], [str(g) for g in gold], str(rec.get("response") or "")), "gsr"
    if not isinstance(pred, (str, list)):
        raise PredictionFormatError(f"{where}: 'prediction' must be a string or a list, got {type(pred).__name__}")
    answers = _lines(pred)
    kind = "subgraphrag" if isinstance(pred, str) and any(_ANS.match(x) for x in pred.split("\n")) else "rog"
    return Prediction(qid, answers, [str(g) for g in gold], pred if isinstance(pred, str) else "\n".join(pred)), kind


def read_predictions(path: str | Path, skip_invalid: bool = False) -> tuple[list[Prediction], str, int, int]:
    """Every row of ``path``, its format (the most common row format), the number of duplicate ids
    and of rows skipped (``skip_invalid``: a bad row is counted and skipped instead of an error)."""
    rows: list[Prediction] = []
    kinds: Counter[str] = Counter()
    skipped = 0
    for lineno, rec in iter_jsonl(path):
        try:
            row, kind = parse_row(rec, f"{path}: line {lineno}")
        except PredictionFormatError:
            if not skip_invalid:
                raise
            skipped += 1
            continue
        rows.append(row)
        kinds[kind] += 1
    if not rows:
        raise PredictionFormatError(f"{path}: no prediction rows" + (f" ({skipped} skipped)" if skipped else ""))
    ids = Counter(r.id for r in rows)
    return rows, kinds.most_common(1)[0][0], sum(n - 1 for n in ids.values() if n > 1), skipped


def question_figures(p: Prediction) -> dict[str, float]:
    """Every per-question quantity of the scoreboard."""
    exact = score_question(QAExample(p.id, p.answers, p.gold, response="\n".join(p.answers)))
    joined = " ".join(p.answers)
    found = sum(_rog_match(joined, g) for g in p.gold)
    rog_p = found / len(p.answers) if p.answers else 0.0
    rog_r = found / len(p.gold) if p.gold else 0.0
    first = p.answers[0] if p.answers else ""
    gold_norm = {normalize_answer(g) for g in p.gold}
    return {
        "hit": float(any(_rog_match(joined, g) for g in p.gold)) if p.answers else 0.0,
        "hit@1_first": float(bool(p.answers) and any(_rog_match(first, g) for g in p.gold)),
        "hit@1": float(bool(first) and normalize_answer(first) in gold_norm),
        "f1": exact["f1"],
        "precision": exact["precision"],
        "recall": exact["recall"],
        "rog_f1": 2 * rog_p * rog_r / (rog_p + rog_r) if rog_p + rog_r else 0.0,
        "rog_precision": rog_p,
        "rog_recall": rog_r,
    }


def score_rows(rows: Sequence[Prediction]) -> dict[str, float]:
    """The scoreboard's figures of one file (fractions)."""
    per = [question_figures(r) for r in rows]
    mean = {k: float(np.mean([q[k] for q in per])) for k in per[0]} if per else {}
    p, r = mean.get("precision", 0.0), mean.get("recall", 0.0)
    return {
        "hit": mean.get("hit", 0.0),
        "hit@1_first": mean.get("hit@1_first", 0.0),
        "hit@1": mean.get("hit@1", 0.0),
        "macro_f1": mean.get("f1", 0.0),
        "f1_of_means": 2 * p * r / (p + r) if p + r else 0.0,
        "precision": p,
        "recall": r,
        "rog_f1": mean.get("rog_f1", 0.0),
        "rog_precision": mean.get("rog_precision", 0.0),
        "rog_recall": mean.get("rog_recall", 0.0),
    }


def score_values(rows: Sequence[Prediction]) -> QuestionValues:
    """The per-question parts of every figure of `score_rows` (``f1_of_means``: the F1 of the
    per-question precisions and recalls over ones), for their 95% bootstrap intervals."""
    per = [question_figures(r) for r in rows]
    out = QuestionValues([r.id for r in rows])
    for name, key in [(c, c) for c in COLUMNS if c not in ("macro_f1", "f1_of_means")] + [("macro_f1", "f1")]:
        out.add_mean(name, [q[key] for q in per])
    ones = [1.0] * len(per)
    return out.add_f1("f1_of_means", [q["precision"] for q in per], ones, [q["recall"] for q in per], ones)


def split_ids(data: str, split: str) -> list[str]:
    """The question ids of a split (streamed), for the missing count."""
    return [str(rec.get("id")) for _, _, rec in iter_records(data, split) if isinstance(rec, dict)]


def scoreboard(
    files: Iterable[str | Path], data: str | None = None, split: str = "test", skip_invalid: bool = False
) -> list[dict[str, Any]]:
    """One row per file: its format, counts and every figure."""
    expected = set(split_ids(data, split)) if data else None
    out = []
    for path in files:
        rows, kind, duplicates, skipped = read_predictions(path, skip_invalid)
        seen: dict[str, Prediction] = {}
        for row in rows:
            seen.setdefault(row.id, row)  # a repeated id counts once (its first row)
        scored = list(seen.values())
        missing = len(expected - set(seen)) if expected is not None else None
        extra = len(set(seen) - expected) if expected is not None else None
        figures = score_rows(scored)
        bounds = score_values(scored).intervals()
        out.append(
            {
                "file": str(path),
                "format": kind,
                "scored": len(scored),
                "missing": missing,
                "not_in_split": extra,
                "duplicates": duplicates,
                "skipped_rows": skipped,
                **figures,
                INTERVALS: {name: list(b) for name, b in bounds.items() if b is not None},
            }
        )
    return out


def table(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown, percentages with two decimals, each with its 95% interval over the file's questions."""
    head = ["file", "format", "scored", "missing", *COLUMNS]
    lines = []
    for r in rows:
        bounds = r.get(INTERVALS) or {}
        cells = [Path(r["file"]).name, r["format"], format_cell(r["scored"]), format_cell(r["missing"])]
        lines.append(cells + [format_cell(r[c], bounds.get(c), 2, 100) for c in COLUMNS])
    return markdown_table(head, lines, left=2)


def counts_line(row: dict[str, Any], split: str) -> str | None:
    """A file's rows that were not scored as they are, in one line for the screen (None: none)."""
    counts = (
        (row["duplicates"], "repeated ids (the first row of each is scored)"),
        (row["skipped_rows"], "rows in no known format skipped (--skip_invalid)"),
        (row.get("not_in_split"), f"ids not in the {split} split of --data (scored all the same)"),
    )
    said = [f"{n} {what}" for n, what in counts if n]
    return f"{Path(row['file']).name}: " + ", ".join(said) if said else None
