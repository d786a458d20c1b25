"""GSR indexing data, pseudo question -> relation: templates from a relation's name (or an LLM
template file), filled with real subject entities of the relation taken from the KG index."""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from gsr_train.data.rows import RowError
from gsr_train.datamodules.gsr_chains import _jsonl_records
from gsr_train.features.relation_tokens import relation_words
from gsr_train.io import stable_hash
from gsr_train.kg.index import KGIndex

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------- indexing data
_TEMPLATES = (
    "what is the {p} of [SUBJECT]",
    "what {p} does [SUBJECT] have",
    "[SUBJECT] {p}",
    "which {p} is linked to the {t} [SUBJECT]",
    "tell me the {p} of [SUBJECT]",
    "who or what is the {p} of [SUBJECT]",
    "what is [SUBJECT]'s {p}",
    "find the {p} for the {t} [SUBJECT]",
    "name the {p} of [SUBJECT]",
    "[SUBJECT] is a {t}; what is its {p}",
)


def default_templates(relation: str) -> list[str]:
    """Offline pseudo-question templates from a relation's name (property words + type words)."""
    parts = relation.split(".")
    prop = relation_words(parts[-1]) if parts else relation
    typ = relation_words(parts[-2]) if len(parts) >= 2 else "thing"
    if prop.endswith(" s"):  # Freebase mediator names: spouse_s, sibling_s
        prop = prop[:-2]
    return [t.format(p=prop, t=typ) for t in _TEMPLATES]


@dataclass
class IndexSources:
    """LLM-written templates and/or ready-made pseudo questions per relation."""

    templates: dict[str, list[str]] = field(default_factory=dict)
    questions: dict[str, list[str]] = field(default_factory=dict)
    dropped: Counter = field(default_factory=Counter)


def load_index_file(path: str | Path) -> IndexSources:
    """Read LLM indexing data: JSONL rows ``{"relation", "templates": [...]}``,
    ``{"relation", "template"}`` or ``{"relation", "question"}`` (filled), or a JSON object
    ``{relation: [templates]}``. Templates without exactly one ``[SUBJECT]`` are dropped (counted).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"indexing template file {path} does not exist")
    src = IndexSources()

    def add_template(rel: str, t: str) -> None:
        if not isinstance(t, str) or t.count("[SUBJECT]") != 1:
            src.dropped["template without exactly one [SUBJECT]"] += 1
            return
        src.templates.setdefault(rel, [])
        if t not in src.templates[rel]:
            src.templates[rel].append(t)

    if path.suffix == ".json":
        obj = json.loads(path.read_text())
        if not isinstance(obj, dict):
            raise ValueError(f"{path}: expected a JSON object relation -> list of templates")
        for rel, ts in obj.items():
            if not isinstance(ts, list):
                raise RowError(str(path), rel, "templates", "expected a list of strings")
            for t in ts:
                add_template(rel, t)
        return src
    for lineno, raw in _jsonl_records(path):
        if not isinstance(raw, dict) or not isinstance(raw.get("relation"), str):
            raise RowError(str(path), f"line {lineno}", "relation", "missing or not a string")
        rel = raw["relation"]
        if "question" in raw:
            if not isinstance(raw["question"], str) or not raw["question"].strip():
                raise RowError(str(path), f"line {lineno}", "question", "not a non-empty string")
            src.questions.setdefault(rel, []).append(raw["question"])
        elif "templates" in raw:
            if not isinstance(raw["templates"], list):
                raise RowError(str(path), f"line {lineno}", "templates", "expected a list of strings")
            for t in raw["templates"]:
                add_template(rel, t)
        elif "template" in raw:
            add_template(rel, raw["template"])
        else:
            raise RowError(str(path), f"line {lineno}", "templates", "row has none of templates / template / question")
    if src.dropped:
        log.warning("%s: %s", path, dict(src.dropped))
    return src


def relation_subjects(
    index: KGIndex | None,
    splits: Sequence[str] = ("train",),
    exclude: Iterable[str] = (),
    per_relation: int = 10,
    seed: int = 0,
) -> dict[str, list[str]]:
    """Up to ``per_relation`` distinct named heads of every relation in the given splits' graphs.

    Raw Freebase ids (``m.xxx``) never serve as subjects; ``exclude`` (e.g. the topic
    entities of evaluation questions) keeps test supervision out of the indexing data.
    Sampling is seeded and vectorised (one unique over packed (relation, head) keys).
    """
    if index is None:
        return {}
    lookup = index.entity_lookup()
    named = index.entity_has_text()
    ban = torch.zeros(len(index.entities), dtype=torch.bool)
    ids = [lookup[e] for e in exclude if e in lookup]
    if ids:
        ban[torch.tensor(ids)] = True
    num_e = len(index.entities)
    parts = []  # distinct (relation, head) keys run by run (bounded memory on CWQ-sized splits)
    for s in splits:
        if s not in index.splits:
            continue
        for g in index[s].global_edge_chunks():
            keep = named[g[:, 0]] & ~ban[g[:, 0]]
            parts.append(torch.unique(g[keep, 1] * num_e + g[keep, 0]))
    if not parts:
        return {}
    keys = torch.unique(torch.cat(parts)).numpy()
    rng = np.random.default_rng(seed)
    noise = rng.random(len(keys))
    rel = keys // num_e
    order = np.lexsort((noise, rel))
    rel, head = rel[order], (keys % num_e)[order]
    starts = np.flatnonzero(np.r_[True, rel[1:] != rel[:-1]])
    rank = np.arange(len(rel)) - np.repeat(starts, np.diff(np.r_[starts, len(rel)]))
    take = rank < per_relation
    out: dict[str, list[str]] = {}
    for r, h in zip(rel[take].tolist(), head[take].tolist()):
        out.setdefault(index.relations[r], []).append(index.entities[h])
    return out


@dataclass
class IndexExample:
    text: str
    relation: str


def pseudo_questions(
    relations: Sequence[str],
    subjects: Mapping[str, Sequence[str]],
    sources: IndexSources | None = None,
    per_relation: int = 10,
    seed: int = 0,
    fallback_subject: bool = True,
) -> list[IndexExample]:
    """``per_relation`` pseudo questions per relation (templates x subjects, seeded).

    LLM questions / templates for a relation are used when given, else the name templates.
    A relation without a KG subject gets ``the <type>`` as its subject when
    ``fallback_subject`` (else it gets no indexing example). Text is lower-cased, like
    WebQSP questions.
    """
    out: list[IndexExample] = []
    for rel in relations:
        rng = random.Random(stable_hash("gsr-index", seed, rel))
        if sources is not None and sources.questions.get(rel):
            qs = list(sources.questions[rel])
            rng.shuffle(qs)
            out.extend(IndexExample(q.lower(), rel) for q in qs[:per_relation])
            continue
        templates = (sources.templates.get(rel) if sources is not None else None) or default_templates(rel)
        subj = list(subjects.get(rel, ()))
        if not subj:
            if not fallback_subject:
                continue
            parts = rel.split(".")
            subj = [f"the {relation_words(parts[-2]) if len(parts) >= 2 else 'entity'}"]
        order = list(range(len(templates)))
        rng.shuffle(order)
        rng.shuffle(subj)
        for j in range(per_relation):
            t = templates[order[j % len(order)]]
            s = subj[j % len(subj)]
            out.append(IndexExample(" ".join(t.replace("[SUBJECT]", s).lower().split()), rel))
    return out
