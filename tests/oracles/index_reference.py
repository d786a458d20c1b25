"""The straightforward in-memory KG index builder, kept as the reference the streaming
builder (:mod:`gsr_train.kg.index_build`) is tested and benchmarked against.

It loads every row of every split as Python objects (:func:`~gsr_train.data.rows.load_rows`)
and interns names with a dict: simple and obviously right, but about 0.3 GB of memory per
million triples, so it only serves small data, tests and the side-by-side benchmark.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from gsr_train.data.rows import Row, SkipReport, load_rows
from gsr_train.kg.index import KGIndex, SplitGraphs
from gsr_train.kg.vocab import StringVocab


class _Vocab:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, name: str) -> int:
        idx = self.ids.get(name)
        if idx is None:
            idx = self.ids[name] = len(self.ids)
        return idx

    def names(self) -> list[str]:
        return list(self.ids)


def _encode_split(rows: Iterable[Row], ents: _Vocab, rels: _Vocab) -> tuple[SplitGraphs, int]:
    """Intern strings and build local graphs; returns the split and the duplicate count."""
    ids, questions, answers = [], [], []
    ent_chunks, topic_chunks, answer_chunks, edge_chunks, rel_chunks = [], [], [], [], []
    ent_sizes, edge_sizes = [0], [0]
    duplicates = 0
    for row in rows:
        ids.append(row.id)
        questions.append(row.question)
        answers.append(list(row.answer))
        unique_triples = list(dict.fromkeys(row.graph))
        duplicates += len(row.graph) - len(unique_triples)
        h = np.fromiter((ents(t[0]) for t in unique_triples), dtype=np.int64, count=len(unique_triples))
        r = np.fromiter((rels(t[1]) for t in unique_triples), dtype=np.int64, count=len(unique_triples))
        t = np.fromiter((ents(t[2]) for t in unique_triples), dtype=np.int64, count=len(unique_triples))
        topics = np.array([ents(e) for e in row.q_entity], dtype=np.int64)
        golds = np.array([ents(e) for e in row.a_entity], dtype=np.int64)
        nodes, inverse = np.unique(np.concatenate([topics, golds, h, t]), return_inverse=True)
        nt, na, ne = len(topics), len(golds), len(h)
        local = inverse[nt + na :]
        ent_chunks.append(nodes)
        topic_chunks.append(np.isin(nodes, topics))
        answer_chunks.append(np.isin(nodes, golds))
        edge_chunks.append(np.stack([local[:ne], local[ne:]]))
        rel_chunks.append(r)
        ent_sizes.append(len(nodes))
        edge_sizes.append(ne)

    def cat(chunks, dtype, axis=0, empty=(0,)):
        if not chunks:
            return torch.zeros(empty, dtype=dtype)
        return torch.from_numpy(np.concatenate(chunks, axis=axis)).to(dtype)

    split = SplitGraphs(
        ids=ids,
        questions=questions,
        answers=answers,
        ent_ptr=torch.tensor(ent_sizes, dtype=torch.long).cumsum(0),
        entity_ids=cat(ent_chunks, torch.long),
        topic_mask=cat(topic_chunks, torch.bool),
        answer_mask=cat(answer_chunks, torch.bool),
        edge_ptr=torch.tensor(edge_sizes, dtype=torch.long).cumsum(0),
        edge_index=cat(edge_chunks, torch.long, axis=1, empty=(2, 0)),
        edge_rel=cat(rel_chunks, torch.long),
    )
    return split, duplicates


def build_index_in_memory(source, splits: Sequence[str], skip_invalid: bool = False) -> KGIndex:
    """Read and validate every split, then encode them against one shared vocabulary."""
    ents, rels = _Vocab(), _Vocab()
    split_graphs, skips = {}, {}
    for split in splits:
        rows, report = load_rows(source, split, skip_invalid=skip_invalid, report=SkipReport())
        split_graphs[split], dups = _encode_split(rows, ents, rels)
        skips[split] = {"loaded": report.loaded, "skipped": dict(report.counts), "duplicate_triples_dropped": dups}
    return KGIndex(StringVocab.from_list(ents.names()), StringVocab.from_list(rels.names()), split_graphs, skips)
