"""Open-ended questions (OKGQA): the row format, OKGQA's five categories and the templates.

OKGQA (Sui et al., 2024) asks questions that are answered in a paragraph, not by one fact,
about the entities of a small KG, in five categories (each with two sub-types, paper Table 1).
Here a question is an `OpenQuestion` row that names the RoG-format row whose graph it
is about (``graph_id``). Rows come from three sources: templates filled with a graph's topic
entities, an LLM (``gsr-train llm-open-questions``) and OKGQA's published CSV
(``OKG/filtered_questions_v3.csv``). This module reads and checks them (an error names the
file, the line and the field) and fills the templates. It sits in the data layer, below the
KG index and the LLM steps that use it, so it imports neither.
"""

from __future__ import annotations

import ast
import csv
import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gsr_train.data.errors import UserError
from gsr_train.io import BadLine, iter_jsonl, write_jsonl

# OKGQA's five query types, in the paper's order, with what each asks for (its sub-types).
CATEGORIES: dict[str, str] = {
    "descriptive": "describe a person's significant contributions, or the background and course of an event",
    "explanatory": "explain why something happened, or the relationship between two entities and its significance",
    "predictive": "predict how an entity or a situation may develop, judging from its history",
    "comparative": "compare and contrast two entities or events: similarities, differences, impact",
    "critical": "evaluate the impact of a person, event or idea on a field, or how it can be applied, "
    "and argue a viewpoint",
}
QUESTION_TYPES: tuple[str, ...] = tuple(CATEGORIES)

# OKGQA's sub-types (its generation prompt names these), read as their category.
SUBTYPES: dict[str, str] = {
    "character description": "descriptive",
    "event description": "descriptive",
    "cause explanation": "explanatory",
    "relationship explanation": "explanatory",
    "trend prediction": "predictive",
    "outcome prediction": "predictive",
    "contrast analysis": "comparative",
    "historical comparison": "comparative",
    "evaluation and reflection": "critical",
    "application and practice": "critical",
}

# One template per category: ``{entity}`` is a topic entity, ``{other}`` the second entity of a
# comparison. Each invites a paragraph grounded in the entity's facts, as OKGQA's questions do,
# and ends with "?" (the LLM step asks the same of its questions).
TEMPLATES: dict[str, str] = {
    "descriptive": "Please describe {entity} in detail: what are the most important facts about {entity}, "
    "and how are they connected?",
    "explanatory": "Why is {entity} significant, and how did the connections that define {entity} come about?",
    "predictive": "Based on what is known about {entity} so far, "
    "how do you think the role and influence of {entity} might develop in the future?",
    "comparative": "Compare and contrast {entity} and {other}: "
    "what are their most important similarities and differences?",
    "critical": "How would you evaluate the impact of {entity}, "
    "and what are the strongest arguments for and against your view?",
}

SOURCES = ("template", "llm", "okgqa")

# OKGQA CSV columns: the first of these present gives the entities; graph ids come from the
# first id column present, else from the row number.
ENTITY_COLUMNS = ("entities", "topic_entities", "q_entity", "dbpedia_entities_re", "dbpedia_entities")
ID_COLUMNS = ("id", "qid")


class OpenQuestionError(UserError, ValueError):
    """A question row or file that cannot be read; the message names file, line and field."""

    def __init__(self, where: str, field: str | None, reason: str):
        self.where, self.field, self.reason = where, field, reason
        super().__init__(f"{where}: field {field!r}: {reason}" if field else f"{where}: {reason}")


class NoEntityError(OpenQuestionError):
    """A row whose entity cell lists no entity (``{}``, ``[]``, empty): skippable, and counted, on request."""


def category_of(name: Any) -> str | None:
    """The OKGQA category a label names (``"Comparative"``, ``"contrast analysis"``), or None."""
    if not isinstance(name, str):
        return None
    key = " ".join(name.replace("_", " ").replace("-", " ").lower().split())
    return key if key in CATEGORIES else SUBTYPES.get(key)


def check_types(types: Iterable[str], where: str = "types") -> tuple[str, ...]:
    """Requested categories in canonical spelling, each once; an unknown one is an error naming it."""
    out: list[str] = []
    for t in types:
        c = category_of(t)
        if c is None:
            raise ValueError(f"{where}: unknown question category {t!r} (OKGQA's are {', '.join(QUESTION_TYPES)})")
        if c not in out:
            out.append(c)
    if not out:
        raise ValueError(f"{where}: no question category given (OKGQA's are {', '.join(QUESTION_TYPES)})")
    return tuple(out)


@dataclass
class OpenQuestion:
    """One open-ended question about the graph of RoG row ``graph_id``.

    ``entities``: the entities the question is about (the topic entities, and the second entity
    of a comparison), as named in that graph. ``naturalness`` / ``difficulty``: OKGQA's labels
    when the question has them.
    """

    id: str
    graph_id: str
    question: str
    type: str
    entities: list[str]
    naturalness: str | None = None
    difficulty: str | None = None
    source: str = "template"

    def to_row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: Any, where: str) -> OpenQuestion:
        """A checked question from a row; every wrong field is an `OpenQuestionError` at ``where``.
        Other keys (an LLM step's ``raw_response``) are ignored."""
        if not isinstance(row, dict):
            raise OpenQuestionError(where, None, f"expected a JSON object, got {type(row).__name__}")

        def text(name: str) -> str:
            value = row.get(name)
            if value is None:
                raise OpenQuestionError(where, name, "missing")
            if not isinstance(value, str):
                raise OpenQuestionError(where, name, f"expected a string, got {type(value).__name__}")
            if not value.strip():
                raise OpenQuestionError(where, name, "empty")
            return value.strip()

        def label(name: str) -> str | None:
            value = row.get(name)
            if value is not None and not isinstance(value, str):
                raise OpenQuestionError(where, name, f"expected a string or null, got {type(value).__name__}")
            return (value.strip() or None) if isinstance(value, str) else None

        qid, graph_id, question = text("id"), text("graph_id"), text("question")
        qtype = category_of(text("type"))
        if qtype is None:
            raise OpenQuestionError(
                where, "type", f"unknown category {row['type']!r} (one of: {', '.join(QUESTION_TYPES)})"
            )
        source = text("source")
        if source not in SOURCES:
            raise OpenQuestionError(where, "source", f"{source!r} is not one of {', '.join(SOURCES)}")
        entities = row.get("entities")
        if entities is None:
            raise OpenQuestionError(where, "entities", "missing")
        if not isinstance(entities, list) or not all(isinstance(e, str) and e.strip() for e in entities):
            raise OpenQuestionError(where, "entities", f"expected a list of non-empty names, got {repr(entities)[:80]}")
        if not entities:
            raise OpenQuestionError(where, "entities", "empty (a question names at least one entity)")
        return cls(
            id=qid,
            graph_id=graph_id,
            question=question,
            type=qtype,
            entities=[e.strip() for e in entities],
            naturalness=label("naturalness"),
            difficulty=label("difficulty"),
            source=source,
        )


def _first(q: OpenQuestion, first_line: dict[str, int], lineno: int, where: str, field: str | None) -> OpenQuestion:
    """``q``, its id noted on ``lineno``; an id seen before is an error naming both lines."""
    if q.id in first_line:
        raise OpenQuestionError(where, field, f"duplicate id {q.id!r} (first on line {first_line[q.id]})")
    first_line[q.id] = lineno
    return q


def read_questions(path: str | os.PathLike) -> list[OpenQuestion]:
    """Question rows of a JSONL file (``.gz`` too); a bad line or a duplicate id is an error naming the line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such question file")
    out: list[OpenQuestion] = []
    first_line: dict[str, int] = {}
    for lineno, record in iter_jsonl(path):
        where = f"{path}: line {lineno}"
        if isinstance(record, BadLine):
            raise OpenQuestionError(where, None, str(record))
        out.append(_first(OpenQuestion.from_row(record, where), first_line, lineno, where, "id"))
    return out


def write_questions(path: str | os.PathLike, questions: Iterable[OpenQuestion]) -> int:
    """Write question rows as JSONL (atomically); returns the row count."""
    return write_jsonl(path, (q.to_row() for q in questions))


# ----------------------------------------------------------------------------- OKGQA's CSV


def _literal(text: str) -> Any:
    """A JSON or Python literal (OKGQA writes Python dict reprs); ``None`` when it is neither."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)  # literals only: never runs code
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def resource_name(name: str) -> str:
    """A DBpedia resource URL's last part (``.../resource/Marie_Curie`` -> ``Marie_Curie``, and after a
    ``#``), the node name OKGQA's subgraphs use; any other name unchanged."""
    if "://" not in name:
        return name
    return name.rstrip("/").split("/")[-1].split("#")[-1]


def parse_entities(cell: str | None, where: str, field: str = "entities") -> list[str]:
    """Entity names from a CSV cell: a JSON / Python list, a dict (its values, as OKGQA's
    ``{'person': 'Marie_Curie'}``) or a ``;`` / ``,`` separated list (``;`` when the cell has
    one, so names with commas can be listed). URLs become resource names; repeats are dropped."""
    text = (cell or "").strip()
    if not text:
        raise NoEntityError(where, field, "empty")
    if text[0] in "[{":
        value = _literal(text)
        if isinstance(value, dict):
            items = list(value.values())
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            raise OpenQuestionError(where, field, f"not a list or dict of names: {text[:80]!r}")
    else:
        items = text.split(";" if ";" in text else ",")
    names = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise OpenQuestionError(where, field, f"expected entity names, found {item!r} in {text[:80]!r}")
        names.append(resource_name(item.strip()))
    if not names:
        raise NoEntityError(where, field, "no entity listed")
    return list(dict.fromkeys(names))


def load_okgqa_csv(
    path: str | os.PathLike,
    skip_no_entity: bool = False,
    skipped: list[int] | None = None,
    option: str = "open_ended.skip_no_entity",
) -> list[OpenQuestion]:
    """OKGQA's question CSV (``filtered_questions_v3.csv``: ``question``, ``type``, ``naturalness``,
    ``difficulty``, ``dbpedia_entities_re``, ``id``, ...) as questions with source ``okgqa``.

    Entities: the first column of `ENTITY_COLUMNS` present. ``graph_id`` (and the question
    id): the ``id`` column, else ``qid``, else the 0-based row number, which is how OKGQA numbers
    its subgraphs; name the RoG-format rows of its DBpedia graphs that way. A missing column is
    one error listing it with the columns found; a bad row is an error naming its line.

    A row that lists no entity (OKGQA's own file has six ``{}`` rows) is an error naming ``option``
    (how the caller's user asks to skip such rows); with ``skip_no_entity`` it is skipped and its
    line appended to ``skipped``. Skipped rows keep their number: the graph ids stay OKGQA's.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such OKGQA question file")
    out: list[OpenQuestion] = []
    first_line: dict[str, int] = {}
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise OpenQuestionError(str(path), None, "empty file (no header line)")
            columns = [h.strip() for h in header]
            col: dict[str, int] = {}
            for k, name in enumerate(columns):
                col.setdefault(name.lower(), k)
            entity_col = next((c for c in ENTITY_COLUMNS if c in col), None)
            id_col = next((c for c in ID_COLUMNS if c in col), None)
            missing = [c for c in ("question", "type") if c not in col]
            if entity_col is None:
                missing.append(f"an entity column ({' / '.join(ENTITY_COLUMNS)})")
            if missing or entity_col is None:
                raise OpenQuestionError(
                    str(path),
                    None,
                    f"missing column(s): {', '.join(missing)}; columns found: {', '.join(map(repr, columns))}",
                )
            start, number = reader.line_num + 1, 0
            for cells in reader:
                lineno, start = start, reader.line_num + 1
                where = f"{path}: line {lineno}"
                if not cells:  # a blank line
                    continue
                if len(cells) != len(columns):
                    raise OpenQuestionError(where, None, f"{len(cells)} cells for {len(columns)} columns")
                values = {name: cells[k].strip() for name, k in col.items()}
                graph_id = values[id_col] if id_col else str(number)
                number += 1
                if not graph_id:
                    raise OpenQuestionError(where, id_col, "empty")
                try:
                    entities = parse_entities(values[entity_col], where, entity_col)
                except NoEntityError as e:
                    if not skip_no_entity:
                        raise NoEntityError(
                            where, entity_col, f"{e.reason} (set {option}=true to count and skip such rows)"
                        ) from None
                    if skipped is not None:
                        skipped.append(lineno)
                    continue
                row = {
                    "id": graph_id,
                    "graph_id": graph_id,
                    "question": values["question"],
                    "type": values["type"],
                    "entities": entities,
                    "naturalness": values.get("naturalness"),
                    "difficulty": values.get("difficulty"),
                    "source": "okgqa",
                }
                out.append(_first(OpenQuestion.from_row(row, where), first_line, lineno, where, id_col))
    except UnicodeDecodeError as e:
        raise OpenQuestionError(str(path), None, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise OpenQuestionError(f"{path}: line {reader.line_num}", None, f"not readable as CSV ({e})") from None
    return out


# ----------------------------------------------------------------------------- templates


@dataclass(frozen=True)
class GraphEntities:
    """What the questions about one graph may name.

    ``position``: the graph's row number in its split; it fixes the graph's categories, so a
    windowed run asks what a full run would. ``topics``: its topic entities that have a name.
    ``related``: entities of the same kind (sharing the most relations with a topic entity),
    best first, for comparisons when the graph has one topic entity.
    """

    graph_id: str
    position: int
    topics: tuple[str, ...]
    related: tuple[str, ...] = ()

    @property
    def other(self) -> str | None:
        """The second entity of a comparison: another topic entity, else the best related one."""
        if len(self.topics) > 1:
            return self.topics[1]
        return self.related[0] if self.related else None


def assign_types(position: int, per_graph: int, types: Sequence[str], can_compare: bool) -> tuple[list[str], bool]:
    """The categories asked of the graph at ``position``: ``per_graph`` of ``types`` in turn,
    continuing where the graph before it stopped, so every category comes round. Comparative
    is passed over (second value True) for a graph with one entity to compare."""
    if per_graph < 1:
        raise ValueError(f"per_graph must be at least 1, got {per_graph}")
    start = position * per_graph
    chosen: list[str] = []
    passed = False
    for j in range(len(types)):
        if len(chosen) == per_graph:
            break
        t = types[(start + j) % len(types)]
        if t == "comparative" and not can_compare:
            passed = True
            continue
        chosen.append(t)
    return chosen, passed


def fill_template(category: str, entity: str, other: str | None = None) -> str:
    """`TEMPLATES` ``[category]`` about ``entity`` (and ``other``, for a comparison)."""
    if category == "comparative" and not other:
        raise ValueError("a comparative question needs a second entity")
    return TEMPLATES[category].format(entity=entity, other=other or "")


def template_questions(
    graphs: Iterable[GraphEntities], per_graph: int = 1, types: Sequence[str] = QUESTION_TYPES
) -> tuple[list[OpenQuestion], Counter]:
    """Template questions (source ``template``), ``per_graph`` per graph in the categories of
    `assign_types`, with ids ``<graph_id>/<category>``. Deterministic: no sampling.

    Counts: ``graphs``, ``questions``, ``graphs_without_named_entity`` (no question),
    ``comparative_passed_over`` and ``type_<category>``.
    """
    types = check_types(types)
    counts: Counter = Counter()
    out: list[OpenQuestion] = []
    for g in graphs:
        counts["graphs"] += 1
        if not g.topics:
            counts["graphs_without_named_entity"] += 1
            continue
        chosen, passed = assign_types(g.position, per_graph, types, g.other is not None)
        counts["comparative_passed_over"] += passed
        for t in chosen:
            entities = [g.topics[0], g.other] if t == "comparative" else [g.topics[0]]
            text = fill_template(t, g.topics[0], g.other)
            out.append(OpenQuestion(f"{g.graph_id}/{t}", g.graph_id, text, t, [e for e in entities if e]))
            counts[f"type_{t}"] += 1
    counts["questions"] = len(out)
    return out, counts
