"""A retrieval results file read for the explorer, with Arrow and no loop over triples: where each
question's first answer-bearing triple ranks, and its top triples as edges of the question's graph.

A triple bears an answer when its head or tail is one of the question's answer entities (by name, so
a triple outside the question's graph counts too). Ranks are file order, best first (the results
format); rank 0 is the best triple.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import torch

from gsr_train.eval.results import EdgeMatcher
from gsr_train.explore.sources import ExploreError
from gsr_train.kg.index import KGIndex, SplitGraphs

SCHEMA = pa.schema(
    [("id", pa.string()), ("triples", pa.list_(pa.list_(pa.string()))), ("scores", pa.list_(pa.float64()))]
)
BLOCK_BYTES = 1 << 24  # Arrow's JSON reader reads the file in blocks of this size (rows never split)
MATCH_EDGES = 1 << 21  # edges of the split whose keys one match holds at a time


@dataclass
class RankedTriples:
    """One results file on one split. Per question (split position): ``first_answer`` (rank of the first
    answer-bearing triple, -1: none), ``returned`` (triples in its row, -1: no row). Per kept triple
    (the top ``top`` of each row, question-major, rank order): ``question``, ``rank``, ``score`` (NaN:
    none given), ``edge`` (edge id in the split, -1: not in the question's graph) and ``bears_answer``."""

    first_answer: np.ndarray
    returned: np.ndarray
    question: np.ndarray
    rank: np.ndarray
    score: np.ndarray
    edge: np.ndarray
    bears_answer: np.ndarray
    unknown_ids: int


def _batches(path: Path):
    """The file's record batches (``id``, ``triples``, ``scores``; other fields ignored)."""
    options = pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore")
    compression = "gzip" if path.name.endswith(".gz") else None
    try:
        reader = pj.open_json(
            pa.input_stream(str(path), compression=compression),
            read_options=pj.ReadOptions(block_size=BLOCK_BYTES),
            parse_options=options,
        )
        yield from reader
    except (pa.ArrowInvalid, EOFError, OSError, zlib.error, gzip.BadGzipFile) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ExploreError(f"{path}: not a readable results file ({first})") from None


def masked_nodes(graphs: SplitGraphs, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Owner question and global entity id of every masked node (topic, answer), question-major."""
    nodes = np.flatnonzero(mask)
    return np.searchsorted(graphs.ent_ptr.numpy(), nodes, side="right") - 1, graphs.entity_ids.numpy()[nodes]


def _answer_keys(graphs: SplitGraphs) -> np.ndarray:
    """Sorted ``question * 2**32 + entity`` keys of every (question, answer entity in its graph) pair."""
    owner, ent = masked_nodes(graphs, graphs.answer_mask.numpy())
    return np.unique(owner.astype(np.int64) * (1 << 32) + ent.astype(np.int64))


def _triple_ids(index: KGIndex, triples: pa.ListArray, path: Path, ids: pa.Array) -> tuple[np.ndarray, ...]:
    """Global (head, relation, tail) ids of a batch's triples (-1: not in the vocabulary)."""
    inner = triples.flatten()
    lengths = pc.list_value_length(inner).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(lengths != 3)
    if bad.size:
        row = int(np.searchsorted(triples.offsets.to_numpy(), bad[0], side="right") - 1)
        raise ExploreError(f"{path}: id {ids[row].as_py()!r}: a triple is not [head, relation, tail]")
    names = inner.flatten()
    heads = index.entities.lookup(names.take(pa.array(np.arange(0, len(names), 3))))
    rels = index.relations.lookup(names.take(pa.array(np.arange(1, len(names), 3))))
    tails = index.entities.lookup(names.take(pa.array(np.arange(2, len(names), 3))))
    return heads, rels, tails


def read_ranked(path: str | Path, index: KGIndex, split: str, top: int) -> RankedTriples:
    """The results file ``path`` of ``split``: answer ranks of every row, the top ``top`` triples kept."""
    path = Path(path)
    graphs = index[split]
    position = graphs.position()
    answers = _answer_keys(graphs)
    first = np.full(len(graphs), -1, dtype=np.int64)
    returned = np.full(len(graphs), -1, dtype=np.int64)
    kept: list[tuple[np.ndarray, ...]] = []
    unknown = 0
    for batch in _batches(path):
        ids = batch.column("id")
        if ids.null_count:
            raise ExploreError(f"{path}: a row without a string 'id'")
        rows = np.array([position.get(q, -1) for q in ids.to_pylist()], dtype=np.int64)
        unknown += int((rows < 0).sum())
        triples = batch.column("triples")
        lengths = pc.fill_null(pc.list_value_length(triples), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        returned[rows[rows >= 0]] = lengths[rows >= 0]
        h, r, t = _triple_ids(index, triples, path, ids)
        owner = np.repeat(rows, lengths)
        rank = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        bears = np.isin(owner * (1 << 32) + h, answers) | np.isin(owner * (1 << 32) + t, answers)
        bears &= owner >= 0
        hit = np.flatnonzero(bears)
        _first_answers(first, owner[hit], rank[hit])
        keep = (rank < top) & (owner >= 0)
        kept.append((owner[keep], rank[keep], _scores(batch, lengths)[keep], bears[keep], h[keep], r[keep], t[keep]))
    cols = [np.concatenate(c) for c in zip(*kept)] if kept else [np.zeros(0, np.int64)] * 7
    edge = _edges(index, graphs, cols[0], *cols[4:])
    return RankedTriples(
        first, returned, cols[0], cols[1], cols[2].astype(np.float64), edge, cols[3].astype(bool), unknown
    )


def _edges(index: KGIndex, graphs: SplitGraphs, owner: np.ndarray, h: np.ndarray, r: np.ndarray, t: np.ndarray):
    """Edge id in the split of each (question, head, relation, tail), -1 where the question's graph has
    no such edge; matched in runs of questions, so the matcher's keys cover a run, never the split."""
    out = np.full(owner.size, -1, dtype=np.int64)
    order = np.argsort(owner, kind="stable")
    bounds = graphs.edge_ptr.numpy()
    for q0, q1, part in graphs.chunks(MATCH_EDGES):
        a, b = np.searchsorted(owner[order], [q0, q1])
        at = order[a:b]
        if at.size:
            ids = (torch.from_numpy(x[at].astype(np.int64)) for x in (owner - q0, h, r, t))
            edge = EdgeMatcher(index, part).match_ids(*ids).numpy()
            out[at] = np.where(edge >= 0, edge + bounds[q0], -1)
    return out


def _first_answers(first: np.ndarray, owner: np.ndarray, rank: np.ndarray) -> None:
    """``first[q]``: the smallest rank of an answer-bearing triple of question ``q`` (in place)."""
    if owner.size == 0:
        return
    best = np.full(first.shape, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(best, owner, rank)
    found = best < np.iinfo(np.int64).max
    first[found] = np.where(first[found] >= 0, np.minimum(first[found], best[found]), best[found])


def _scores(batch: pa.RecordBatch, lengths: np.ndarray) -> np.ndarray:
    """Each triple's score, NaN where its row gives none (or not one per triple)."""
    scores = batch.column("scores")
    out = np.full(int(lengths.sum()), np.nan)
    given = pc.fill_null(pc.list_value_length(scores), -1).to_numpy(zero_copy_only=False)
    ok = given == lengths
    if ok.any():
        values = scores.filter(pa.array(ok)).flatten().to_numpy(zero_copy_only=False).astype(np.float64)
        out[np.repeat(ok, lengths)] = values
    return out
