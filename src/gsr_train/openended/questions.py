"""The open-ended questions an OKGQA-style run asks: the embedded set, a JSONL file or OKGQA's CSV.

The row format, OKGQA's categories and the templates live in `gsr_train.data.open_questions`
(the LLM step writes the same rows); this module adds what needs a KG index (template questions
over a split's graphs) and `load_questions`, the one way a run reads its questions.

The embedded set (``load_questions("embedded")``, ``data/webqsp_mini_open.jsonl``) is one
template question per test graph of ``../shared/data/webqsp_mini`` with a named topic entity,
the categories in turn across graphs; ``python data_prep/make_open_questions.py`` rewrites it.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from gsr_train.data.open_questions import (  # noqa: F401  (re-exported: the API of open-ended questions)
    CATEGORIES,
    QUESTION_TYPES,
    TEMPLATES,
    GraphEntities,
    OpenQuestion,
    OpenQuestionError,
    load_okgqa_csv,
    read_questions,
    template_questions,
    write_questions,
)
from gsr_train.llm.steps.open_questions import graph_entities

EMBEDDED = Path(__file__).parent / "data" / "webqsp_mini_open.jsonl"


def questions_from_index(
    index,
    split: str,
    per_graph: int = 1,
    types: Sequence[str] = QUESTION_TYPES,
    max_related: int = 3,
    positions: Iterable[int] | None = None,
) -> tuple[list[OpenQuestion], Counter]:
    """Template questions about the graphs of ``index[split]`` (all, or those at ``positions``):
    their named topic entities, and for comparisons an entity of the same kind
    (`gsr_train.llm.steps.open_questions.graph_entities`). Counts as
    `gsr_train.data.open_questions.template_questions`."""
    todo = range(len(index[split])) if positions is None else positions
    return template_questions(
        (graph_entities(index, split, i, max_related) for i in todo), per_graph=per_graph, types=types
    )


def load_questions(
    spec: str | os.PathLike,
    known_graph_ids: Iterable[str] | None = None,
    skip_unknown: bool = False,
    skip_no_entity: bool = False,
) -> tuple[list[OpenQuestion], dict[str, Any]]:
    """Questions from ``spec``: ``"embedded"``, a ``.jsonl`` / ``.jsonl.gz`` file of question rows
    or an OKGQA ``.csv``. With ``known_graph_ids`` (the ids of the data's rows), a question about
    another graph is an error naming the first few, or a counted skip with ``skip_unknown``. An
    OKGQA CSV row that lists no entity is an error, or a counted skip with ``skip_no_entity``.

    Counts: ``file``, ``questions_read``, ``skipped_no_entity`` (with their lines,
    ``skipped_no_entity_lines``), ``skipped_unknown_graph``, ``questions`` and ``by_type``. No
    question left is an error.
    """
    path = EMBEDDED if str(spec) == "embedded" else Path(spec)
    if not path.exists():
        raise FileNotFoundError(
            f"open questions {str(spec)!r}: no such file (give 'embedded', a .jsonl[.gz] file or an OKGQA .csv)"
        )
    name = path.name.lower()
    no_entity: list[int] = []
    if name.endswith(".csv"):
        questions = load_okgqa_csv(path, skip_no_entity, no_entity)
    elif name.endswith((".jsonl", ".jsonl.gz")):
        questions = read_questions(path)
    else:
        raise ValueError(f"{path}: not a question file (expected .jsonl, .jsonl.gz or OKGQA's .csv)")
    read = len(questions)
    skipped = 0
    if known_graph_ids is not None:
        known = set(known_graph_ids)
        unknown = [q.graph_id for q in questions if q.graph_id not in known]
        if unknown and not skip_unknown:
            shown = ", ".join(map(repr, unknown[:5])) + (", ..." if len(unknown) > 5 else "")
            raise ValueError(
                f"{path}: {len(unknown)} of {read} questions are about graphs not in the data "
                f"(graph_id {shown}); set open_ended.skip_unknown=true to skip them"
            )
        questions = [q for q in questions if q.graph_id in known]
        skipped = read - len(questions)
    if not questions:
        raise ValueError(f"{path}: no question" + (" about a graph of the data" if read else ""))
    by_type = Counter(q.type for q in questions)
    return questions, {
        "file": str(path),
        "questions_read": read,
        "skipped_no_entity": len(no_entity),
        "skipped_no_entity_lines": no_entity,
        "skipped_unknown_graph": skipped,
        "questions": len(questions),
        "by_type": {t: by_type[t] for t in QUESTION_TYPES if by_type[t]},
    }
