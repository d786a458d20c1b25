"""Compiled kernels of the streaming index build: string interning and per-row graph encoding.

They run over Arrow buffers directly (offsets + UTF-8 bytes), so no Python string object is
made per triple: at RoG-CWQ size that is 300M names. All release the GIL, so the build runs
them in worker threads (`gsr_train.kg.encode_batches`).

* `first_appearance` numbers a batch's distinct names (codes of Arrow's
  ``dictionary_encode``) in order of first appearance: per row heads, tails, topic entities,
  answer entities; relations separately, in triple order;
* `intern_hashed` gives those names global ids, batch after batch: an open-addressing
  hash table over the bytes of the vocabulary seen so far, new names appended. The vocabulary
  itself is kept as Arrow-style ``offsets`` / ``data`` arrays, which is also its file format;
  `intern_strings` does the same for plain string arrays (building a vocabulary from a list);
* `encode_rows` turns one row's global ids into its local graph: the sorted distinct
  entities of the row (topics, answers, heads, tails), local head / tail ids, topic and
  answer masks, and the triples with exact duplicates dropped (first occurrence kept).

The caller guarantees capacity before each call (table at most half full after the call,
vocabulary buffers large enough), so the kernels never reallocate.
"""

from __future__ import annotations

import numpy as np
from numba import njit

EMPTY = -1
_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)
LOCAL_BITS = 21  # local node ids and relation ids must fit these bits for duplicate detection


@njit(cache=True, inline="always")
def _same_bytes(a, a_start, b, b_start, n):
    """``a[a_start:a_start+n] == b[b_start:b_start+n]`` byte by byte (stored name vs. candidate)."""
    for k in range(n):
        if a[a_start + k] != b[b_start + k]:
            return False
    return True


@njit(cache=True, inline="always")
def _hash(data, start, stop):
    h = _FNV_OFFSET
    for k in range(start, stop):
        h = (h ^ np.uint64(data[k])) * _FNV_PRIME
    # murmur3 finaliser: spreads FNV's low bits over the whole word
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@njit(cache=True, inline="always")
def _intern_one(offs, data, i, table, id_hash, v_off, v_data, state):
    """Id of string ``i`` of (offs, data); appended to the vocabulary when new.

    ``state[0]``: vocabulary size, ``state[1]``: vocabulary bytes.
    """
    return _intern_known(offs, data, i, _hash(data, offs[i], offs[i + 1]), table, id_hash, v_off, v_data, state)


@njit(cache=True, inline="always")
def _intern_known(offs, data, i, h, table, id_hash, v_off, v_data, state):
    """`_intern_one` of a string whose hash ``h`` is already known."""
    s, e = offs[i], offs[i + 1]
    n = e - s
    mask = np.uint64(table.size - 1)
    slot = h & mask
    while True:
        v = table[slot]
        if v == EMPTY:
            new = state[0]
            b = state[1]
            for k in range(n):
                v_data[b + k] = data[s + k]
            v_off[new + 1] = b + n
            id_hash[new] = h
            table[slot] = new
            state[0] = new + 1
            state[1] = b + n
            return new
        if id_hash[v] == h and v_off[v + 1] - v_off[v] == n and _same_bytes(v_data, v_off[v], data, s, n):
            return v
        slot = (slot + np.uint64(1)) & mask


@njit(cache=True, nogil=True)
def intern_strings(offs, data, stride, phase, count, table, id_hash, v_off, v_data, state, out):
    """Ids of strings ``phase, phase + stride, ...`` (``count`` of them) of one Arrow array."""
    for j in range(count):
        out[j] = _intern_one(offs, data, phase + j * stride, table, id_hash, v_off, v_data, state)


@njit(cache=True, nogil=True)
def first_appearance(
    t_codes,
    triple_ptr,
    q_codes,
    q_ptr,
    a_codes,
    a_ptr,
    n_codes,
    heads,
    tails,
    topics,
    answers,
    rels,
    ent_order,
    rel_order,
):
    """Local ids of a batch's names in order of first appearance, from their dictionary codes.

    ``*_codes``: the code of each name in one dictionary of the batch's distinct strings (Arrow's
    ``dictionary_encode`` of the flat triple strings, topic and answer entities together). Entities
    are numbered per row: heads, tails, topics, answers (the order the in-memory builder interned
    them in, so both give the same vocabulary), relations in triple order; ``ent_order`` /
    ``rel_order`` get the code of each local id. Returns ``(entities, relations)``: how many
    distinct ones the batch has."""
    ent_local = np.full(n_codes, -1, dtype=np.int64)
    rel_local = np.full(n_codes, -1, dtype=np.int64)
    n_ent = 0
    n_rel = 0
    for row in range(triple_ptr.size - 1):
        for phase in (0, 2):
            out = heads if phase == 0 else tails
            for j in range(triple_ptr[row], triple_ptr[row + 1]):
                c = t_codes[3 * j + phase]
                if ent_local[c] < 0:
                    ent_local[c] = n_ent
                    ent_order[n_ent] = c
                    n_ent += 1
                out[j] = ent_local[c]
        for j in range(q_ptr[row], q_ptr[row + 1]):
            c = q_codes[j]
            if ent_local[c] < 0:
                ent_local[c] = n_ent
                ent_order[n_ent] = c
                n_ent += 1
            topics[j] = ent_local[c]
        for j in range(a_ptr[row], a_ptr[row + 1]):
            c = a_codes[j]
            if ent_local[c] < 0:
                ent_local[c] = n_ent
                ent_order[n_ent] = c
                n_ent += 1
            answers[j] = ent_local[c]
    for j in range(rels.size):
        c = t_codes[3 * j + 1]
        if rel_local[c] < 0:
            rel_local[c] = n_rel
            rel_order[n_rel] = c
            n_rel += 1
        rels[j] = rel_local[c]
    return n_ent, n_rel


@njit(cache=True, nogil=True)
def intern_hashed(offs, data, hashes, table, id_hash, v_off, v_data, state, out):
    """Ids of every string of (offs, data) whose hashes are given (``hashes[i]`` of string ``i``).

    The serial step of a parallel build: workers intern each batch into a small local
    vocabulary first (its distinct names in order of first appearance, with their hashes);
    interning those names here, batch by batch, gives every name the id it gets in one pass."""
    for i in range(offs.size - 1):
        out[i] = _intern_known(offs, data, i, hashes[i], table, id_hash, v_off, v_data, state)


@njit(cache=True)
def rehash(id_hash, count, table):
    """Fill an empty (all ``EMPTY``) table with the first ``count`` vocabulary ids."""
    mask = np.uint64(table.size - 1)
    for v in range(count):
        slot = id_hash[v] & mask
        while table[slot] != EMPTY:
            slot = (slot + np.uint64(1)) & mask
        table[slot] = v


@njit(cache=True, nogil=True)
def rehash_strings(v_off, v_data, count, id_hash):
    """Hashes of the first ``count`` vocabulary strings (rebuilding state from the files)."""
    for v in range(count):
        id_hash[v] = _hash(v_data, v_off[v], v_off[v + 1])


@njit(cache=True)
def lookup(offs, data, table, id_hash, v_off, v_data, out):
    """Vocabulary id of every string of (offs, data), ``-1`` for unknown ones (read only)."""
    mask = np.uint64(table.size - 1)
    for i in range(offs.size - 1):
        s, e = offs[i], offs[i + 1]
        n = e - s
        h = _hash(data, s, e)
        slot = h & mask
        out[i] = -1
        while True:
            v = table[slot]
            if v == EMPTY:
                break
            if id_hash[v] == h and v_off[v + 1] - v_off[v] == n and _same_bytes(v_data, v_off[v], data, s, n):
                out[i] = v
                break
            slot = (slot + np.uint64(1)) & mask


@njit(cache=True, nogil=True)
def encode_rows(
    triple_ptr,
    heads,
    rels,
    tails,
    q_ptr,
    topics,
    a_ptr,
    answers,
    ent_out,
    topic_out,
    answer_out,
    ent_count,
    head_out,
    tail_out,
    rel_out,
    edge_count,
):
    """Local graphs of a batch of rows (see the module docstring); returns duplicates dropped.

    Outputs are written consecutively: ``ent_out`` / ``topic_out`` / ``answer_out`` get
    ``ent_count[row]`` entries per row, ``head_out`` / ``tail_out`` / ``rel_out``
    ``edge_count[row]``. A row whose local ids or relation ids do not fit ``LOCAL_BITS``
    bits makes the kernel return ``-(row + 1)``.
    """
    limit = 1 << LOCAL_BITS
    n_pos = 0
    e_pos = 0
    dups = 0
    for row in range(triple_ptr.size - 1):
        t0, t1 = triple_ptr[row], triple_ptr[row + 1]
        q0, q1 = q_ptr[row], q_ptr[row + 1]
        a0, a1 = a_ptr[row], a_ptr[row + 1]
        nt = t1 - t0
        m = (q1 - q0) + (a1 - a0) + 2 * nt
        every = np.empty(m, dtype=np.int64)
        k = 0
        for j in range(q0, q1):
            every[k] = topics[j]
            k += 1
        for j in range(a0, a1):
            every[k] = answers[j]
            k += 1
        for j in range(t0, t1):
            every[k] = heads[j]
            every[k + nt] = tails[j]
            k += 1
        every.sort()
        n_nodes = 0
        for j in range(m):
            if j == 0 or every[j] != every[j - 1]:
                every[n_nodes] = every[j]
                n_nodes += 1
        nodes = every[:n_nodes]
        if n_nodes >= limit:
            return -(row + 1)
        for j in range(n_nodes):
            ent_out[n_pos + j] = nodes[j]
            topic_out[n_pos + j] = False
            answer_out[n_pos + j] = False
        for j in range(q0, q1):
            topic_out[n_pos + np.searchsorted(nodes, topics[j])] = True
        for j in range(a0, a1):
            answer_out[n_pos + np.searchsorted(nodes, answers[j])] = True
        ent_count[row] = n_nodes
        n_pos += n_nodes
        # triples keyed by (local head, relation, local tail); keep the first of each key
        keys = np.empty(nt, dtype=np.int64)
        for j in range(nt):
            h = np.searchsorted(nodes, heads[t0 + j])
            t = np.searchsorted(nodes, tails[t0 + j])
            r = rels[t0 + j]
            if r >= limit:
                return -(row + 1)
            keys[j] = (h << (2 * LOCAL_BITS)) | (np.int64(r) << LOCAL_BITS) | t
        order = np.argsort(keys, kind="mergesort")  # stable: the first occurrence leads its run
        keep = np.ones(nt, dtype=np.bool_)
        for j in range(1, nt):
            if keys[order[j]] == keys[order[j - 1]]:
                keep[order[j]] = False
        kept = 0
        for j in range(nt):
            if keep[j]:
                key = keys[j]
                head_out[e_pos + kept] = key >> (2 * LOCAL_BITS)
                rel_out[e_pos + kept] = (key >> LOCAL_BITS) & (limit - 1)
                tail_out[e_pos + kept] = key & (limit - 1)
                kept += 1
        dups += nt - kept
        edge_count[row] = kept
        e_pos += kept
    return dups
