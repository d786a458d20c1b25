"""Compiled (numba) CPU kernels behind `.serving`: one question's graph in two calls.

Scoring one WebQSP question is ~1,000 triples and ~900 entities: a few hundred kilobytes
of arithmetic. Written as torch ops it is dozens of small kernels, each with microseconds
of dispatch cost and each writing an ``[N, 2H]`` or ``[T, H]`` temporary to memory, so a
question costs milliseconds. These kernels do the per-node and per-triple work in one pass
each, with every temporary a row in registers or L1:

* `prepare_graph`: validates the ids, maps nodes to projection rows, computes the
  DDE (same means as `gsr_train.features.structure.dde`), keeps one copy of each
  distinct DDE row and numbers the graph's distinct relations;
* `score_triples`: per node the question cosine, per distinct DDE row its
  projection, per triple ``w . relu(head row + tail row + pair row + ...) + b``.

``nogil=True``: several questions can be scored by Python threads at once.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

ROWS_AHEAD = 4  # how many rows ahead the loops over random table rows prefetch


@intrinsic
def _prefetch(typingctx, table, row, col):
    """Hint the CPU to fetch the cache line of ``table[row, col]`` (2-d array); no effect on results.

    Rows of the projection tables are read in random order; hardware prefetchers only
    follow a row once it has been started, so the loops announce the rows they will need
    a few iterations ahead and the memory latencies overlap.
    """
    if not isinstance(table, types.Array) or table.ndim != 2:
        return None

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        inds = [context.cast(builder, v, t, types.intp) for v, t in zip(args[1:], signature.args[1:])]
        ptr = cgutils.get_item_pointer2(
            context,
            builder,
            data=array.data,
            shape=cgutils.unpack_tuple(builder, array.shape),
            strides=cgutils.unpack_tuple(builder, array.strides),
            layout=array_type.layout,
            inds=inds,
            wraparound=False,
            boundscheck=False,
        )
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0"
        )
        # read access, high temporal locality, data cache
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.none(table, row, col), codegen


@njit(inline="always")
def _prefetch_row(table, row, start, stop):
    for col in range(start, stop, 16):  # one hint per 64-byte line of float32
        _prefetch(table, row, col)


# status codes of prepare_graph (0 = ok; the second return value names the offending position)
OK, BAD_EDGE, BAD_RELATION, BAD_ENTITY, UNPROJECTED = 0, 1, 2, 3, 4


@njit(cache=True, nogil=True)
def _dde_into(out, head, tail, forward_rounds, reverse_rounds):
    """Fill ``out [N, 2 * (1 + F + R)]`` (channels 0-1 already hold the topic one-hot)."""
    n = out.shape[0]
    deg_in = np.zeros(n, np.float32)
    deg_out = np.zeros(n, np.float32)
    for e in range(head.shape[0]):
        deg_in[tail[e]] += 1.0
        deg_out[head[e]] += 1.0
    for i in range(n):  # reciprocals once: a division per node and round is most of the DDE's cost
        deg_in[i] = 1.0 / deg_in[i] if deg_in[i] > 0 else 0.0
        deg_out[i] = 1.0 / deg_out[i] if deg_out[i] > 0 else 0.0
    base = 2
    for direction in range(2):
        rounds = forward_rounds if direction == 0 else reverse_rounds
        src = head if direction == 0 else tail
        dst = tail if direction == 0 else head
        deg = deg_in if direction == 0 else deg_out  # reciprocal degrees
        prev = 0
        for r in range(rounds):
            cur = base + 2 * r
            for e in range(src.shape[0]):
                s, d = src[e], dst[e]
                out[d, cur] += out[s, prev]
                out[d, cur + 1] += out[s, prev + 1]
            for i in range(n):
                out[i, cur] *= deg[i]
                out[i, cur + 1] *= deg[i]
            prev = cur
        base += 2 * rounds


@njit(cache=True, nogil=True)
def _distinct_rows(feats):
    """``(row_of_node [N], first_node_of_row [D])``: exact dedup of the rows' bit patterns."""
    n, c = feats.shape
    bits = feats.view(np.uint32)
    size = 1
    while size < 2 * n:
        size *= 2
    slots = np.full(size, -1, np.int64)
    row_of = np.zeros(n, np.int64)
    first = np.zeros(max(n, 1), np.int64)
    d = 0
    for i in range(n):
        h = np.uint64(1469598103934665603)  # FNV-1a over the 32-bit words
        for k in range(c):
            h = (h ^ np.uint64(bits[i, k])) * np.uint64(1099511628211)
        pos = np.int64(h & np.uint64(size - 1))
        while True:
            j = slots[pos]
            if j < 0:
                slots[pos] = d
                first[d] = i
                row_of[i] = d
                d += 1
                break
            same = True
            r = first[j]
            for k in range(c):
                if bits[r, k] != bits[i, k]:
                    same = False
                    break
            if same:
                row_of[i] = j
                break
            pos = (pos + 1) & (size - 1)
    return row_of, first[: max(d, 1)]


@njit(cache=True, nogil=True)
def prepare_graph(
    head,
    tail,
    rel,
    topic,
    entity_ids,
    ent_row,
    num_relations,
    structure,
    forward_rounds,
    reverse_rounds,
    relation_emb,
    q,
):
    """Everything per question before the per-relation matmul.

    ``structure``: 0 none, 1 topic one-hot, 2 DDE. Returns ``(status, where, rows [N],
    rel_ids [P], pair_of_triple [T], distinct_features [D, C], feature_row [N],
    products [P, d])`` where ``products`` holds ``z_q * z_r`` per distinct relation when
    ``q`` is non-empty (else ``[0, d]``); a non-zero status leaves the other outputs
    unspecified.
    """
    n = topic.shape[0]
    t = head.shape[0]
    rows = np.empty(n, np.int64)
    inv = np.empty(t, np.int64)
    rel_ids = np.empty(t, np.int64)
    channels = 0 if structure == 0 else (2 if structure == 1 else 2 * (1 + forward_rounds + reverse_rounds))
    empty_f = np.zeros((1, channels), np.float32)
    empty_r = np.zeros(n, np.int64)
    products = np.zeros((0, relation_emb.shape[1]), np.float32)
    status, where = OK, -1
    for e in range(t):
        if head[e] < 0 or head[e] >= n or tail[e] < 0 or tail[e] >= n:
            status, where = BAD_EDGE, e
        elif rel[e] < 0 or rel[e] >= num_relations:
            status, where = BAD_RELATION, e
        if status != OK:
            break
    if status == OK:
        for i in range(n):
            g = entity_ids[i]
            if g < 0 or g >= ent_row.shape[0]:
                status, where = BAD_ENTITY, i
                break
            rows[i] = ent_row[g]
            if rows[i] < 0:
                status, where = UNPROJECTED, i
                break
    if status != OK:
        return status, where, rows, rel_ids[:0], inv, empty_f, empty_r, products
    slot = np.full(num_relations, -1, np.int64)
    p = 0
    for e in range(t):
        r = rel[e]
        if slot[r] < 0:
            slot[r] = p
            rel_ids[p] = r
            p += 1
        inv[e] = slot[r]
    if q.shape[0]:
        products = np.empty((p, q.shape[0]), np.float32)
        for i in range(p):
            for k in range(q.shape[0]):
                products[i, k] = relation_emb[rel_ids[i], k] * q[k]
    if channels == 0:
        return OK, -1, rows, rel_ids[:p], inv, empty_f, empty_r, products
    feats = np.zeros((n, channels), np.float32)
    for i in range(n):
        feats[i, 0 if topic[i] else 1] = 1.0
    if structure == 2:
        _dde_into(feats, head, tail, forward_rounds, reverse_rounds)
    feature_row, first = _distinct_rows(feats)
    distinct = np.empty((first.shape[0], channels), np.float32)
    for d in range(first.shape[0]):
        distinct[d] = feats[first[d]]
    return OK, -1, rows, rel_ids[:p], inv, distinct, feature_row, products


@njit(inline="always")
def _pair_rows(q, w_q, b_first, rel_ids, rel_proj, pair_extra, h):
    """``[max(P, 1), H]`` first-layer part shared by all triples of a relation: its projection
    + the question part + bias (+ the precomputed extras); computed once per distinct relation."""
    q_part = b_first.copy()
    for j in range(h):
        s = np.float32(0.0)
        for k in range(q.shape[0]):
            s += w_q[j, k] * q[k]
        q_part[j] += s
    num_pairs = rel_ids.shape[0]
    pair = np.empty((max(num_pairs, 1), h), np.float32)
    for p in range(num_pairs):
        rr = rel_ids[p]
        for j in range(h):
            pair[p, j] = rel_proj[rr, j] + q_part[j]
        if pair_extra.shape[0]:
            for j in range(h):
                pair[p, j] += pair_extra[p, j]
    return pair


@njit(inline="always")
def _struct_rows(distinct, w_struct, h):
    """``[D, 2H]`` structural part (head side, tail side) of each distinct feature row: the
    rows are few and sparse, so zero channels are skipped."""
    channels = distinct.shape[1]
    struct = np.zeros((distinct.shape[0], 2 * h), np.float32)
    for r in range(distinct.shape[0]):
        for k in range(channels):
            v = distinct[r, k]
            if v != 0.0:
                for j in range(2 * h):
                    struct[r, j] += v * w_struct[k, j]
    return struct


@njit(inline="always")
def _question_cosines(q, rows, unit, rel_ids, rel_unit, w_cos_r, pair):
    """``[N]`` cosine of each node with the question (zeros when the model has no cosine
    features); the relations' cosines go straight into their ``pair`` rows (times ``w_cos_r``)."""
    n = rows.shape[0]
    dim = q.shape[0]
    h = pair.shape[1]
    cos = np.zeros(n, np.float32)
    if unit.shape[1]:
        norm = np.float32(0.0)
        for k in range(dim):
            norm += q[k] * q[k]
        q_unit = q / max(np.sqrt(norm), np.float32(1e-12))
        for i in range(n):
            if i + ROWS_AHEAD < n:
                _prefetch_row(unit, rows[i + ROWS_AHEAD], 0, dim)
            s = np.float32(0.0)
            ri = rows[i]
            for k in range(dim):
                s += unit[ri, k] * q_unit[k]
            cos[i] = s
        for p in range(rel_ids.shape[0]):
            s = np.float32(0.0)
            rr = rel_ids[p]
            for k in range(dim):
                s += rel_unit[rr, k] * q_unit[k]
            for j in range(h):
                pair[p, j] += s * w_cos_r[j]
    return cos


@njit(cache=True, nogil=True, fastmath=True)
def score_triples(
    head,
    tail,
    pair_of_triple,
    rows,
    feature_row,
    distinct,
    rel_ids,
    q,
    w_q,
    b_first,
    rel_proj,
    pair_extra,
    w_struct,
    ent,
    unit,
    rel_unit,
    w_cos_h,
    w_cos_t,
    w_cos_r,
    w_out,
    b_out,
    out,
):
    """Logits ``out [T]`` of one question's triples.

    ``w_q [H, d]`` / ``b_first``: question part of the first layer; ``rel_proj [R, H]``:
    relation projections; ``pair_extra [P, H]`` (or ``[0, H]``): precomputed per-relation
    extras (the question-relation product); ``w_struct [C, 2H]``: structural-feature
    weights (head side, tail side); ``ent [U + 1, 2H]``: head-side / tail-side entity
    projections per row; ``unit`` / ``rel_unit``: unit-length embeddings for the cosine
    features (zero columns when the model has none).
    """
    h = w_out.shape[0]
    # per relation of the graph: projection + question part + bias (+ extras, + cosine below)
    pair = _pair_rows(q, w_q, b_first, rel_ids, rel_proj, pair_extra, h)
    struct = _struct_rows(distinct, w_struct, h)
    cos = _question_cosines(q, rows, unit, rel_ids, rel_unit, w_cos_r, pair)
    num_triples = head.shape[0]
    for e in range(num_triples):
        if e + ROWS_AHEAD < num_triples:
            _prefetch_row(ent, rows[head[e + ROWS_AHEAD]], 0, h)
            _prefetch_row(ent, rows[tail[e + ROWS_AHEAD]], h, 2 * h)
        hn, tn = head[e], tail[e]
        rh, rt, p = rows[hn], rows[tn], pair_of_triple[e]
        fh, ft = feature_row[hn], feature_row[tn]
        ch, ct = cos[hn], cos[tn]
        acc = np.float32(0.0)
        for j in range(h):
            v = (
                ent[rh, j]
                + ent[rt, h + j]
                + pair[p, j]
                + struct[fh, j]
                + struct[ft, h + j]
                + ch * w_cos_h[j]
                + ct * w_cos_t[j]
            )
            acc += w_out[j] * max(v, np.float32(0.0))
        out[e] = acc + b_out
    return out
