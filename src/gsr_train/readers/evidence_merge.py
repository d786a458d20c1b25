"""Evidence from several retrievers in one prompt (GNN-RAG's retrieval augmentation, generalised).

Each source's results rows give their best-first evidence lines in the reader's format (paths or
triples, as `gsr_train.readers.prompts.evidence_lines` renders them, at most the source's
``top_k``). The merged list takes the sources in turn, rank by rank (the best line of each source
before the second line of any), and drops a line already shown (the same text from another
source), so when the token budget cuts the prompt every source keeps its best lines. Every line
remembers its source; each source's share of the prompt is bounded in tokens (``share``) when
the prompt is built (`gsr_train.readers.prompts.within_shares`), and the whole prompt by
``qa.max_prompt_tokens``.

A merged row is a results row: ``evidence`` (``[{"line", "source", "entities"}]``), ``shares``
(source -> tokens or None), ``triples`` (every source's triples, de-duplicated, in merged order),
``answers`` (the sources' candidate answers, in turn) and ``sources`` (lines per source), so the
readers, answer-from-retrieval and eval.py read it like any other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

from gsr_train.eval.retrieval_answers import candidate_answers
from gsr_train.readers.prompts import evidence_lines


@dataclass(frozen=True)
class Source:
    """One evidence source of a merged prompt: its label, its rows by question id, how many lines
    it offers (``top_k``) and the most tokens it may take (``share``, None: no own bound)."""

    label: str
    rows: Mapping[str, Mapping[str, Any]]
    top_k: int
    share: int | None = None


def merge_rows(
    sources: Sequence[Source], ids: Sequence[str], fmt: str, topics: Mapping[str, Sequence[str]] | None = None
) -> dict[str, dict[str, Any]]:
    """The merged results row of every question in ``ids`` (see the module docstring)."""
    labels = [s.label for s in sources]
    if len(set(labels)) != len(labels):
        raise ValueError(f"evidence sources need distinct labels, got {labels}")
    shares = {s.label: s.share for s in sources}
    merged: dict[str, dict[str, Any]] = {}
    for qid in ids:
        per_source = []
        for s in sources:
            lines, ents = evidence_lines(s.rows.get(qid), fmt, s.top_k)
            per_source.append([(line, s.label, e) for line, e in zip(lines, ents)])
        evidence: dict[str, dict[str, Any]] = {}
        for rank in zip_longest(*per_source):
            for item in rank:
                if item is not None and item[0] not in evidence:
                    evidence[item[0]] = {"line": item[0], "source": item[1], "entities": list(item[2])}
        rows = [s.rows.get(qid) or {} for s in sources]
        triples = {tuple(t): None for row in rows for t in row.get("triples") or [] if len(t) == 3}
        candidates = [candidate_answers(row, (topics or {}).get(qid, ())) for row in rows]
        answers = {a: None for rank in zip_longest(*candidates) for a in rank if a is not None}
        merged[qid] = {
            "id": qid,
            "evidence": list(evidence.values()),
            "shares": shares,
            "triples": [list(t) for t in triples],
            "answers": list(answers),
            "sources": {label: sum(e["source"] == label for e in evidence.values()) for label in labels},
        }
    return merged
