"""Answering with the retrieval alone (``qa.reading.method=retrieval-answers``): each question's top
candidate entity from its results row (`gsr_train.eval.retrieval_answers.candidate_answers`:
the row's own ``answers``, else its paths' ends, else the non-topic entities of its best triples).
Every reader run also scores it next to its reader (the ``retrieval_answers`` row), so each reader's
row shows what reading adds over its evidence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gsr_train.eval.retrieval_answers import candidate_answers
from gsr_train.readers.interface import Evidence, Question, Reading, ReadingInputs
from gsr_train.readers.prompts import ReaderExample


@dataclass
class CandidateExample(ReaderExample):
    """A question with its evidence's ranked candidate answers."""

    candidates: list[str] = field(default_factory=list)


class RetrievalAnswers:
    """The top ``n`` candidates of the whole results row (not cut to ``top_k``) are the answers."""

    name = "retrieval"

    def __init__(self, inputs: ReadingInputs | None = None, n: int = 1) -> None:
        if int(n) < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n = int(n)

    def prepare(self, questions: Sequence[Question], evidence: Evidence) -> list[ReaderExample]:
        rows = evidence or {}
        return [
            CandidateExample.of(q, candidates=candidate_answers(rows.get(q["id"]), q.get("topics") or ()))
            for q in questions
        ]

    def answer(self, batch: Sequence[ReaderExample]) -> list[Reading]:
        picked = [list(getattr(ex, "candidates", []))[: self.n] for ex in batch]
        return [Reading("\n".join(p), p) for p in picked]
