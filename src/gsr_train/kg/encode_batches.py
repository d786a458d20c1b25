"""Record batches to the arrays of the index, batch by batch, spread over worker threads.

Every name gets a global id in order of first appearance over the whole split (per row: heads,
tails, topic entities, answer entities; relations in triple order), so the ids do not depend
on how the rows were batched; each row then becomes its local graph and fingerprint
(`gsr_train.kg.encode_kernels`). Only the ids are sequential: a name's id depends on every
batch before it. So a batch goes through three steps:

1. ``local_names`` (a helper thread): the batch's distinct names, in order of first appearance
   within the batch, with their vocabulary hashes, and each mention's local id. This is all of
   the hashing of strings: one Arrow ``dictionary_encode`` of the batch's strings, then a kernel
   that numbers them in the order above;
2. ``global_ids`` (the calling thread, batch after batch): the batch's distinct names interned
   into the global vocabulary in their local order, which gives each the id one name-by-name
   pass gives it (a name's first appearance in the split is its first appearance in the first
   batch that has it). Only distinct names cost anything here (a sixth of the mentions at
   WebQSP shape), and their hashes are known;
3. ``encode_graphs`` (a helper thread): mentions to global ids, local graphs, row fingerprints.

The kernels release the GIL, and so do Arrow and numpy, so the helpers are threads sharing the
vocabulary and the batches: nothing is copied between processes. The files are the same bytes
whatever the worker count (``tests/test_prep_workers.py``), and the same as the name-by-name
build before it (the vocabulary's lookup table grows at the same batches to the same size).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gsr_train.arrays import string_buffers
from gsr_train.data.errors import UserError
from gsr_train.data.row_batches import RowBatch
from gsr_train.kg import encode_kernels as K
from gsr_train.kg.vocab import StringInterner
from gsr_train.parallel import ordered_map, prefetch, thread_pool


class IndexBuildError(UserError, RuntimeError):
    """A row the index cannot hold (too many entities in one graph): the message names it."""


# growing files of a split: name -> dtype (what one batch appends to each)
BATCH_ARRAYS = {
    "row_hash": "uint64",
    "entity_ids": "int32",
    "topic_mask": "bool",
    "answer_mask": "bool",
    "ent_count": "int64",
    "edge_head": "int32",
    "edge_tail": "int32",
    "edge_rel": "int32",
    "edge_count": "int64",
}


@dataclass
class Distinct:
    """A batch's distinct names in order of first appearance: bytes, offsets and hashes."""

    offsets: np.ndarray
    data: np.ndarray
    hashes: np.ndarray
    room: tuple[int, int]  # (names, bytes) one pass reserves in the vocabulary for the batch

    @classmethod
    def of(cls, dictionary: pa.Array, codes: np.ndarray, room: tuple[int, int]) -> Distinct:
        """The strings ``dictionary[codes]``, with their vocabulary hashes."""
        offs, data = string_buffers(dictionary.take(pa.array(codes)))
        offsets = (offs - offs[0]).astype(np.int64)
        data = np.ascontiguousarray(data[int(offs[0]) : int(offs[-1])])
        hashes = np.empty(codes.size, np.uint64)
        K.rehash_strings(offsets, data, codes.size, hashes)
        return cls(offsets, data, hashes, room)


@dataclass
class LocalNames:
    """Step 1 of a batch: its distinct names and each mention's local id. ``batch`` no longer
    holds its name strings (the ids replace them; a batch waiting for its turn stays small)."""

    batch: RowBatch
    ents: Distinct
    rels: Distinct
    mentions: tuple[np.ndarray, ...]  # local ids of heads, tails, topics, answers, relations


_NO_NAMES = pa.array([], pa.string())


def _span(arr: pa.Array) -> int:
    offs, _ = string_buffers(arr)
    return int(offs[-1] - offs[0])


def local_names(batch: RowBatch) -> LocalNames:
    """Step 1 (any thread): the batch's distinct names, in the order one pass meets them.

    One Arrow ``dictionary_encode`` over all of the batch's strings (its hashing is much faster
    than interning name by name), then `gsr_train.kg.encode_kernels.first_appearance`
    numbers entities and relations apart, in one pass's order."""
    n_trip, n_top, n_ans = batch.num_triples, int(batch.topic_ptr[-1]), int(batch.answer_ptr[-1])
    kind = batch.triples.type
    parts = [batch.triples, *(a if a.type == kind else a.cast(kind) for a in (batch.topics, batch.answer_entities))]
    encoded = pc.dictionary_encode(pa.chunked_array(parts, kind), null_encoding="encode")
    # (Arrow drops empty chunks: the codes are cut back into their three parts by length)
    dictionary = encoded.chunk(0).dictionary if encoded.num_chunks else _NO_NAMES
    chunks = [c.indices.to_numpy(zero_copy_only=False) for c in encoded.chunks]
    codes = chunks[0] if len(chunks) == 1 else np.concatenate(chunks) if chunks else np.zeros(0, np.int32)
    t_codes, q_codes, a_codes = np.split(codes, [3 * n_trip, 3 * n_trip + n_top])
    heads, tails, rels = (np.empty(n_trip, np.int32) for _ in range(3))
    topics, answers = np.empty(n_top, np.int32), np.empty(n_ans, np.int32)
    ent_order = np.empty(2 * n_trip + n_top + n_ans, np.int64)
    rel_order = np.empty(n_trip, np.int64)
    n_ent, n_rel = K.first_appearance(
        t_codes,
        batch.triple_ptr,
        q_codes,
        batch.topic_ptr,
        a_codes,
        batch.answer_ptr,
        len(dictionary),
        heads,
        tails,
        topics,
        answers,
        rels,
        ent_order,
        rel_order,
    )
    t_span = _span(batch.triples)
    ent_room = (2 * n_trip + n_top + n_ans, t_span + _span(batch.topics) + _span(batch.answer_entities))
    return LocalNames(
        dataclasses.replace(batch, triples=_NO_NAMES, topics=_NO_NAMES, answer_entities=_NO_NAMES),
        Distinct.of(dictionary, ent_order[:n_ent], ent_room),
        Distinct.of(dictionary, rel_order[:n_rel], (n_trip, t_span) if n_trip else (0, 0)),
        (heads, tails, topics, answers, rels),
    )


def global_ids(local: Distinct, vocab: StringInterner) -> np.ndarray:
    """Step 2 (in batch order): the global id of each of a batch's distinct names.

    The vocabulary reserves what one pass reserves for the batch (room for every mention, not
    only the distinct names): its lookup table grows at the same batches to the same size, so
    its file is the same bytes."""
    n = local.hashes.size
    out = np.empty(n, np.int64)
    if local.room[0]:
        vocab.reserve(*local.room)
    if n:
        K.intern_hashed(
            local.offsets,
            local.data,
            local.hashes,
            vocab.table,
            vocab.hashes,
            vocab.offsets,
            vocab.data,
            vocab.state,
            out,
        )
    return out


def encode_graphs(
    batch: RowBatch,
    heads: np.ndarray,
    tails: np.ndarray,
    topics: np.ndarray,
    answers: np.ndarray,
    relations: np.ndarray,
) -> tuple[dict, int]:
    """Step 3 (any thread): each row's local graph from its global ids, and its fingerprint."""
    n_rows, n_trip = len(batch), len(heads)
    max_nodes = 2 * n_trip + len(topics) + len(answers)
    out = {
        "entity_ids": np.empty(max_nodes, np.int32),
        "topic_mask": np.empty(max_nodes, np.bool_),
        "answer_mask": np.empty(max_nodes, np.bool_),
        "ent_count": np.empty(n_rows, np.int64),
        "edge_head": np.empty(n_trip, np.int32),
        "edge_tail": np.empty(n_trip, np.int32),
        "edge_rel": np.empty(n_trip, np.int32),
        "edge_count": np.empty(n_rows, np.int64),
    }
    dups = K.encode_rows(
        batch.triple_ptr,
        heads,
        relations,
        tails,
        batch.topic_ptr,
        topics,
        batch.answer_ptr,
        answers,
        out["entity_ids"],
        out["topic_mask"],
        out["answer_mask"],
        out["ent_count"],
        out["edge_head"],
        out["edge_tail"],
        out["edge_rel"],
        out["edge_count"],
    )
    if dups < 0:
        row = -dups - 1
        raise IndexBuildError(
            f"{batch.source}: row {batch.ids[row]!r}: field 'graph': more than "
            f"{1 << K.LOCAL_BITS} distinct entities or relation ids in one graph"
        )
    n_nodes, n_edges = int(out["ent_count"].sum()), int(out["edge_count"].sum())
    for name in ("entity_ids", "topic_mask", "answer_mask"):
        out[name] = out[name][:n_nodes]
    for name in ("edge_head", "edge_tail", "edge_rel"):
        out[name] = out[name][:n_edges]
    out["row_hash"] = row_fingerprints(batch, out)
    return out, int(dups)


_Local = tuple[Any, LocalNames]
_WithIds = tuple[Any, RowBatch, tuple[np.ndarray, ...], np.ndarray, np.ndarray]


def _local_step(item: tuple[Any, RowBatch]) -> _Local:
    tag, batch = item
    return tag, local_names(batch)


def _graphs_step(step: _WithIds) -> tuple[Any, RowBatch, dict, int]:
    tag, batch, (heads, tails, topics, answers, relations), ent_ids, rel_ids = step
    out, dups = encode_graphs(
        batch, ent_ids[heads], ent_ids[tails], ent_ids[topics], ent_ids[answers], rel_ids[relations]
    )
    return tag, batch, out, dups


def _sizes(vocab: StringInterner) -> tuple[int, int]:
    return len(vocab), int(vocab.table.size)


def encode_stream(
    items: Iterable[tuple[Any, RowBatch]], ents: StringInterner, rels: StringInterner, workers: int
) -> Generator[tuple[Any, RowBatch, dict, int, dict], None, None]:
    """``(tag, batch, arrays, duplicate triples dropped, vocab_at)`` for every ``(tag, batch)`` of
    ``items``, in order, the names interned into ``ents`` / ``rels`` (``tag``: anything the caller
    needs back with the batch, such as where the reader was when it read it; ``vocab_at``: the
    vocabularies' names and lookup-table size right after the batch, ``{"entities": (names,
    table size), "relations": ...}``, what a checkpoint taken after writing it records).

    ``workers`` threads work: this one (reading the batches, step 2 and whatever the caller does
    with each batch: writing it) and ``workers - 1`` helpers running steps 1 and 3 of the batches
    around the current one; from 3 workers on, one of them reads the batches ahead
    (`gsr_train.parallel.prefetch`), so this thread keeps only step 2 and the writing.
    ``ents`` / ``rels`` may then hold the names of a batch or two beyond the last one yielded
    (their ids are final, given in split order), hence ``vocab_at``.
    """
    source = prefetch(items) if workers >= 3 else items
    helpers = workers - 1 - (workers >= 3)
    ahead = helpers + 2  # batches in flight per step: enough that no thread waits for work

    def with_ids(steps: Iterator[_Local]) -> Iterator[_WithIds]:
        for tag, local in steps:  # this thread, in batch order: the one sequential step
            ent_ids, rel_ids = global_ids(local.ents, ents), global_ids(local.rels, rels)
            at = {"entities": _sizes(ents), "relations": _sizes(rels)}
            yield (tag, at), local.batch, local.mentions, ent_ids, rel_ids

    with thread_pool(helpers) as pool:
        stage1 = ordered_map(_local_step, source, pool, ahead)
        stage3 = ordered_map(_graphs_step, with_ids(stage1), pool, ahead)
        try:
            for (tag, at), batch, out, dups in stage3:
                yield tag, batch, out, dups, at
        finally:
            stage3.close()
            stage1.close()
            if isinstance(source, Generator):
                source.close()


_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9))


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser (uint64 arithmetic wraps, as it should here)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def row_fingerprints(batch: RowBatch, out: dict) -> np.ndarray:
    """One uint64 per row from its question, its answers, its topic and answer entities and the
    *set* of its triples (order and duplicates ignored): equal fingerprints in two splits mean
    the same example twice."""
    text = np.fromiter(
        (
            int.from_bytes(
                hashlib.blake2b(
                    (q + "\x1f" + "\x1e".join(sorted(a))).encode("utf-8", "surrogatepass"), digest_size=8
                ).digest(),
                "little",
            )
            for q, a in zip(batch.questions, batch.answers)
        ),
        dtype=np.uint64,
        count=len(batch),
    )
    node_start = np.concatenate([np.zeros(1, np.int64), np.cumsum(out["ent_count"])])[:-1]
    base = np.repeat(node_start, out["edge_count"])
    ids = out["entity_ids"].astype(np.uint64)
    with np.errstate(over="ignore"):
        edge = _mix64(
            ids[base + out["edge_head"]] * _MIX[0]
            ^ (out["edge_rel"].astype(np.uint64) + np.uint64(1)) * _MIX[1]
            ^ ids[base + out["edge_tail"]] * _MIX[2]
        )
        total = np.concatenate([np.zeros(1, np.uint64), np.cumsum(edge, dtype=np.uint64)])
        ptr = np.concatenate([np.zeros(1, np.int64), np.cumsum(out["edge_count"])])
        graph = total[ptr[1:]] - total[ptr[:-1]]  # order-independent sum per row
        # topic and answer entities (as sets) are part of the example too
        role = out["topic_mask"].astype(np.uint64) + np.uint64(2) * out["answer_mask"].astype(np.uint64)
        node = np.where(role > 0, _mix64(ids * _MIX[2] + role), np.uint64(0))
        node_total = np.concatenate([np.zeros(1, np.uint64), np.cumsum(node, dtype=np.uint64)])
        nptr = np.concatenate([np.zeros(1, np.int64), np.cumsum(out["ent_count"])])
        marked = node_total[nptr[1:]] - node_total[nptr[:-1]]
        return _mix64(text ^ _mix64(graph) ^ _mix64(marked + _MIX[1]))
