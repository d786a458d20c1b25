"""Scoring a reader's answers: the QA metrics (`gsr_train.eval.qa`) of its readings and the
``predictions_<variant>.jsonl`` rows a run writes (what was asked, shown, answered and expected)."""

from __future__ import annotations

from collections.abc import Sequence

from gsr_train.eval.qa import QAExample, QAReport, qa_metrics
from gsr_train.readers.interface import Reading
from gsr_train.readers.prompts import ReaderExample


def score_readings(examples: Sequence[ReaderExample], readings: Sequence[Reading]) -> tuple[QAReport, list[dict]]:
    """The metrics of one reading per example, and the prediction rows to write."""
    if len(examples) != len(readings):
        raise ValueError(f"a reader gave {len(readings)} readings for {len(examples)} questions")
    qa = [
        QAExample(ex.id, r.answers, ex.answers, r.text, ex.in_kg, ex.hops, ex.entities)
        for ex, r in zip(examples, readings)
    ]
    rows = [
        {
            "id": ex.id,
            "question": ex.question,
            "prediction": r.answers,
            "response": r.text,
            "answers": ex.answers,
            "in_kg": ex.in_kg,
            "hops": ex.hops,
            "evidence_shown": ex.evidence_shown,
            "evidence_total": ex.evidence_total,
            "entities": ex.entities,
            **({"evidence_sources": ex.sources} if ex.sources else {}),
        }
        for ex, r in zip(examples, readings)
    ]
    return qa_metrics(qa), rows
