"""Answering with the retriever alone: the baseline every reader is compared with.

A results row ranks triples (and, for path retrievers, may name its ``answers`` or ``paths``); its
candidate answers are the row's own ``answers`` when it has them (a GNN's candidates), else the end
entities of its ``paths`` in order (GSR's chains executed on the graph), else the entities of its
triples in rank order that are not the question's topic entities (a retriever's best triple usually
ends at the answer). The top ``n`` candidates are the
"prediction", scored by the same QA metrics as the readers, so a reader's row shows what reading
adds over its own evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gsr_train.eval.qa import QAExample, QAReport, normalize_answer, qa_metrics

ANSWER_VARIANT = "retrieval_answers"


def candidate_answers(row: Mapping[str, Any] | None, topics: Iterable[str] = ()) -> list[str]:
    """The ranked candidate answers of one results row (see the module docstring)."""
    if not row:
        return []
    given = row.get("answers")
    if isinstance(given, list) and given:
        names = [a.get("name", a.get("entity")) if isinstance(a, Mapping) else a for a in given]
        return list(dict.fromkeys(str(n) for n in names if n))
    skip = {normalize_answer(t) for t in topics}
    out: dict[str, None] = {}
    for path in row.get("paths") or []:  # a path retriever (GSR chains): where each path ends
        end = str(path).replace(" <- ", " -> ").split(" -> ")[-1].strip()
        if end and normalize_answer(end) not in skip:
            out.setdefault(end, None)
    if out:
        return list(out)
    for triple in row.get("triples") or []:
        if not isinstance(triple, (list, tuple)) or len(triple) != 3:
            continue
        for entity in (triple[2], triple[0]):  # the tail first: a triple points from the topic outwards
            name = str(entity)
            if name and normalize_answer(name) not in skip:
                out.setdefault(name, None)
    return list(out)


def answers_report(
    questions: Sequence[Mapping[str, Any]],
    rows: Mapping[str, Mapping[str, Any]],
    topics: Mapping[str, Sequence[str]],
    n: int = 1,
) -> QAReport:
    """QA metrics of answering each question with its top ``n`` retrieval candidates."""
    examples = []
    for q in questions:
        predicted = candidate_answers(rows.get(q["id"]), topics.get(q["id"], ()))[: max(int(n), 0)]
        examples.append(
            QAExample(
                q["id"],
                predicted,
                list(q["answers"]),
                response="\n".join(predicted),
                in_kg=bool(q.get("in_kg", True)),
                hops=int(q.get("hops", -1)),
            )
        )
    return qa_metrics(examples)
