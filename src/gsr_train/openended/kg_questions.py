"""Open-ended questions as the run's data when ``data.kg`` names a KG (OKGQA's own setting).

OKGQA asks about DBpedia entities and fetches each question's subgraph from DBpedia's endpoint around
them; its question file names no RoG row. With ``data.kg`` (an endpoint's URL or a store folder) and a
question file, each question becomes a row without a graph: its topic entities are the entities it
names, as IRIs (``open_ended.entity_prefix`` + the resource name: ``Marie_Curie`` ->
``http://dbpedia.org/resource/Marie_Curie``), and `gsr_train.kg.extracted_data` cuts its graph
from the KG as for any question without one (k-hop, per-entity limit, PageRank down to
``data.extract.max_triples``). The rows are written once, keyed by their content, under
``<cache>/open_questions/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gsr_train.data.open_questions import OpenQuestion
from gsr_train.io import atomic_dir, stable_hash, write_jsonl

NOT_IN_IRIS = '<>"{}|^`\\'  # characters an IRI cannot hold raw (percent-encoded); a space becomes "_"


def entity_iri(name: str, prefix: str) -> str:
    """The KG's name of an entity a question names: ``prefix`` + its resource name (DBpedia's form: spaces
    as ``_``, characters an IRI cannot hold percent-encoded, other Unicode kept as DBpedia keeps it);
    an IRI already is one; no prefix: the name as a label (``_`` read as a space)."""
    if "://" in name:
        return name
    if not prefix:
        return name.replace("_", " ")
    local = "".join(f"%{ord(c):02X}" if c in NOT_IN_IRIS else c for c in name.strip().replace(" ", "_"))
    return prefix + local


def question_rows(questions: Sequence[OpenQuestion], prefix: str) -> list[dict]:
    """One RoG row without a graph per graph the questions are about: id = ``graph_id``, topic entities
    the KG's names of the entities its (first) question names, no answers (open-ended)."""
    rows: dict[str, dict] = {}
    for q in questions:
        if q.graph_id not in rows:
            topics = list(dict.fromkeys(entity_iri(e, prefix) for e in q.entities))
            rows[q.graph_id] = {"id": q.graph_id, "question": q.question, "answer": [], "q_entity": topics}
    return list(rows.values())


def questions_folder(questions: Sequence[OpenQuestion], split: str, cache_dir: str | Path, prefix: str) -> Path:
    """A dataset folder holding the questions' rows as ``<split>.jsonl`` (written once, atomically)."""
    rows = question_rows(questions, prefix)
    folder = Path(cache_dir) / "open_questions" / f"{split}-{stable_hash(rows)}"
    if not (folder / f"{split}.jsonl").is_file():
        with atomic_dir(folder) as tmp:
            write_jsonl(tmp / f"{split}.jsonl", rows)
    return folder
