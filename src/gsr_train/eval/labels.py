"""Relevance-label files (e.g. SubgraphRAG's GPT-4o triples) as edge masks of a split.

Rows are ``{"id": qid, "triples": [[h, r, t], ...]}`` (JSONL, optionally gzipped). A row with
an empty list means "no label": that question is left out of labelled-triple recall, and so
is a split question without a row. Triples are matched to edges with the same vectorised
matcher as retrieval results (`gsr_train.eval.results.EdgeMatcher`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from gsr_train.eval.results import EdgeMatcher, FileRows, MatchStats, match_rows, read_triple_rows
from gsr_train.kg.index import KGIndex

log = logging.getLogger(__name__)


def load_labelled_triples(
    path: str | Path | FileRows,
    index: KGIndex,
    split: str,
    skip_unknown: bool = False,
    skip_option: str = "skip_unknown",
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """``(labelled BoolTensor[sum E], labelled_questions BoolTensor[Q], stats)`` of the labels file
    ``path`` (or its rows, already read: `gsr_train.eval.results.parse_triple_file`).

    An id that is not in the split or a labelled triple that is not in the question's graph
    raises `gsr_train.eval.results.TripleFileError` naming file, line, id and triple;
    with ``skip_unknown`` they are counted in ``stats`` and dropped (a question whose labels
    were all dropped is then not labelled, counted as ``questions_without_matched_labels``).
    """
    graphs = index[split]
    stats = MatchStats()
    parsed = read_triple_rows(path, graphs, stats, skip_unknown, skip_option=skip_option)
    edges, found = match_rows(EdgeMatcher(index, graphs), parsed, stats, skip_unknown, skip_option)
    num_e = int(graphs.edge_ptr[-1]) if len(graphs) else 0
    labelled = torch.zeros(num_e, dtype=torch.bool)
    labelled[edges[found]] = True
    stats.duplicate_triples = int(found.sum()) - int(labelled.sum())
    has_list = torch.zeros(len(graphs), dtype=torch.bool)
    listed = torch.zeros(len(graphs), dtype=torch.bool)
    has_list[parsed.question] = True  # rows with at least one triple
    listed[torch.tensor(list(parsed.rows), dtype=torch.long)] = True
    has_edge = torch.zeros(len(graphs), dtype=torch.bool)
    has_edge[parsed.question[found]] = True
    out = stats.to_dict()
    out.update(
        questions=len(graphs),
        rows_with_labels=int(has_list.sum()),
        rows_without_labels=int((listed & ~has_list).sum()),
        questions_without_matched_labels=int((has_list & ~has_edge).sum()),
        labelled_questions=int(has_edge.sum()),
        labelled_edges=int(labelled.sum()),
    )
    if stats.missing_questions:
        log.info(
            "%s: %d questions of split %r have no row (treated as unlabelled)", path, stats.missing_questions, split
        )
    if stats.unknown_ids or stats.unmatched_triples:
        log.warning("%s", stats.summary())
    return labelled, has_edge, out
