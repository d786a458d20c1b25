"""Weak supervision from shortest paths: triple labels, hop counts and relation chains.

SubgraphRAG labels a triple positive when it lies on a shortest path between a topic
entity ``q`` and an answer entity ``a`` of the question's directed graph. Per (q, a) pair
both directions are tried: q->a ("forward") and a->q ("backward"); if both have paths only
the shorter direction is kept (both when equally long). The union over all pairs is the
label set. Unlike the public code (a networkx ``DiGraph`` keeps one edge per (h, t) pair),
labels are per triple id, so every parallel relation on a shortest path is a positive.

How it is computed (no per-pair or per-path Python loops for the labels):

1. one forward BFS (along head->tail) and one backward BFS (along tail->head) from every
   topic entity of every question, all advancing together (`gsr_train.kg.bfs`);
2. per (q, a) pair, ``dist_from_q[a]`` and ``dist_to_q[a]`` decide which direction is kept;
3. a sweep back from the kept answers through the BFS layers marks every edge
   ``(h, t)`` with ``dist_from_q[h] + 1 + dist_to_a[t] == dist_from_q[a]`` for some kept
   answer ``a`` (and the mirror image for backward paths).

GSR needs relation chains read from the topic entity: a forward path gives its relations
in order, a backward path ``a -> ... -> q`` its relations in the order met walking from
``q`` (reversed). ``chains_raw`` holds the chains of all kept paths, ``chains_filtered``
only those of kept forward paths (run in one direction from the topic to the answer).
Chains are enumerated over the labelled DAG with `gsr_train.kg.chains.walk_chains`,
capped at ``max_chains`` per question.

``hops[i]``: the length of the kept shortest paths (minimum over pairs); 0 when the only
connection is a topic entity that is itself an answer; -1 when no pair has a path
(``num_no_path`` counts these questions).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gsr_train.arrays import segment_sum
from gsr_train.config import DEFAULT_MAX_CHAINS
from gsr_train.io import atomic_write, cache_meta, file_digest, stable_hash, write_json
from gsr_train.kg.bfs import Adjacency, batched_bfs, dag_sweep, instance_shift
from gsr_train.kg.chains import Chain, merge_chains, walk_chains
from gsr_train.kg.index import KGIndex, SplitGraphs, default_cache_dir
from gsr_train.memory import keep_freed_memory
from gsr_train.parallel import fork_pool, ordered_map, resolve_workers, shared
from gsr_train.progress import progress

log = logging.getLogger(__name__)

SUPERVISION_FORMAT = 1
# BFS states per chunk: 1-2 MB of working arrays, which stay in cache (at 20M rows, 8M-state
# chunks took 2.5x as long); a chunk is still hundreds of questions' levels in one numpy pass
DEFAULT_CHUNK_STATES = 1 << 17
PROGRESS_THRESHOLD = 2000  # questions: a bar (or log lines) for splits larger than this


@dataclass
class Supervision:
    """Shortest-path supervision of one split (see the module docstring for the rules)."""

    triple_label: torch.Tensor  # [sum E] bool: edge lies on a kept shortest path
    hops: torch.Tensor  # [Q] long: kept shortest path length, 0 topic is answer, -1 no path
    chains_raw: list[list[Chain]]  # per question: relation-id chains of all kept paths
    chains_filtered: list[list[Chain]]  # per question: chains of kept forward paths only
    num_no_path: int
    num_chains_capped: int = 0  # questions whose chains hit ``max_chains``
    max_chains: int = DEFAULT_MAX_CHAINS

    def num_positives(self, split: SplitGraphs) -> torch.Tensor:
        """Positive triples per question (``[Q]``)."""
        # memory-mapped labels: reduceat reads them in place (a torch count would allocate 4 B per edge)
        return torch.from_numpy(segment_sum(self.triple_label.numpy(), split.edge_ptr.numpy()))

    def to_state(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def summary(self, split: SplitGraphs) -> dict:
        """The figures of this supervision of ``split`` (``gsr-train supervision``'s table), JSON-ready."""
        positives = self.num_positives(split).float()
        with_path = self.hops > 0
        raw = torch.tensor([len(c) for c in self.chains_raw], dtype=torch.float)
        filtered = torch.tensor([len(c) for c in self.chains_filtered], dtype=torch.float)

        def stats(x: torch.Tensor) -> dict:
            if x.numel() == 0:
                return {"mean": 0.0, "median": 0.0, "max": 0}
            return {"mean": round(float(x.mean()), 3), "median": float(x.median()), "max": int(x.max())}

        return {
            "questions": len(split),
            "with_path": int(with_path.sum()),
            "topic_is_answer_only": int((self.hops == 0).sum()),
            "without_path": self.num_no_path,
            "no_positive_triple": int((positives == 0).sum()),
            "hops": {str(k): v for k, v in sorted(Counter(self.hops.tolist()).items())},
            "triples": int(split.edge_ptr[-1]),
            "positives": int(self.triple_label.sum()),
            "positives_per_question": stats(positives),
            "positives_per_question_with_path": stats(positives[with_path]),
            "chains_raw": int(raw.sum()),
            "chains_filtered": int(filtered.sum()),
            "chains_raw_per_question": stats(raw),
            "chains_filtered_per_question": stats(filtered),
            "questions_with_filtered_chain": int((filtered > 0).sum()),
            "chain_cap": self.max_chains,
            "questions_at_chain_cap": self.num_chains_capped,
        }


def _check(split: SplitGraphs) -> None:
    """Shapes must be consistent, else the BFS would read other questions (local ids are
    checked chunk by chunk, by the workers: `_outside_graph`)."""
    n, e = int(split.ent_ptr[-1]), int(split.edge_ptr[-1])
    if split.edge_index.shape != (2, e) or split.edge_rel.numel() != e:
        raise ValueError(f"supervision: edge arrays do not match edge_ptr (sum E = {e})")
    if split.topic_mask.numel() != n or split.answer_mask.numel() != n:
        raise ValueError(f"supervision: topic/answer masks do not match ent_ptr (sum N = {n})")


@dataclass(frozen=True)
class _OutsideGraph:
    """A chunk's first edge whose local ids point outside its question's graph."""

    question: int  # index in the split
    edge: int  # index in the question's edges
    entities: int  # the question's local entities

    def error(self, split: SplitGraphs) -> ValueError:
        return ValueError(
            f"supervision: edge {self.edge} of question {split.ids[self.question]!r} "
            f"points outside its graph of {self.entities} entities"
        )


def _outside_graph(q0: int, c_ent_ptr: np.ndarray, c_edge_ptr: np.ndarray, heads, tails) -> _OutsideGraph | None:
    """The first edge of a chunk (questions from ``q0``) with a local id outside its graph."""
    if not len(heads):
        return None
    sizes = np.diff(c_ent_ptr)
    local_n = np.repeat(sizes, np.diff(c_edge_ptr))
    bad = (np.minimum(heads, tails) < 0) | (np.maximum(heads, tails) >= local_n)
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad)[0])
    q = int(np.searchsorted(c_edge_ptr, i, side="right") - 1)
    return _OutsideGraph(q0 + q, i - int(c_edge_ptr[q]), int(sizes[q]))


def _pairs(ent_ptr, node_question, inst_question, topics, answers):
    """All (instance, answer node) pairs: every answer of the instance's question."""
    answer_q = node_question[answers]
    a_ptr = np.searchsorted(answer_q, np.arange(len(ent_ptr)))  # answers are sorted by question
    starts = a_ptr[inst_question]
    counts = a_ptr[inst_question + 1] - starts
    pair_inst = np.repeat(np.arange(len(topics), dtype=np.int64), counts)
    pos = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return pair_inst, answers[starts[pair_inst] + pos]


def build_supervision(
    split: SplitGraphs,
    max_chains: int = DEFAULT_MAX_CHAINS,
    chunk_states: int = DEFAULT_CHUNK_STATES,
    workers: int | None = None,
) -> Supervision:
    """Shortest-path labels, hops and relation chains of every question of ``split``.

    Questions are processed in chunks of about ``chunk_states`` BFS states (local entities
    x topic entities) to bound memory (~24 bytes per state); the results do not depend on it.
    Questions are independent, so ``workers`` (``None``:
    `gsr_train.parallel.resolve_workers`) take chunks side by side: this process and ``workers - 1`` forked from it,
    which read the split's (memory-mapped) arrays in place; the chunks' results come back in
    question order, so the output is the same for any count. (Threads would not do: the BFS
    advances level by level in Python, and the GIL held two threads to 1.3x.)
    """
    _check(split)
    if max_chains < 1:
        raise ValueError(f"max_chains must be >= 1, got {max_chains}")
    workers = resolve_workers(workers)
    t0 = time.perf_counter()
    ent_ptr = split.ent_ptr.numpy().astype(np.int64)
    edge_ptr = split.edge_ptr.numpy().astype(np.int64)
    # the edge arrays stay in their narrow (memory-mapped) dtype; each chunk widens its own slice
    edge_index, rel = split.edge_index.numpy(), split.edge_rel.numpy()
    topic_mask, answer_mask = split.topic_mask.numpy(), split.answer_mask.numpy()

    arrays = (ent_ptr, edge_ptr, edge_index, rel, topic_mask, answer_mask, max_chains)
    bounds = _chunks(split, chunk_states)
    labels, hops, chains_raw, chains_filtered, capped = [], [], [], [], 0
    with (
        # forked (when there is enough to share: a fork costs tens of ms) before the progress bar
        # starts its thread; children keep their freed memory for the next chunk (fresh pages cost
        # them a fault each: 15% of their time)
        fork_pool(workers - 1 if len(bounds) >= 4 * workers else 0, arrays, keep_freed_memory) as pool,
        progress(len(split), "supervision (shortest paths)", None, threshold=PROGRESS_THRESHOLD) as advance,
    ):
        # a few chunks per worker in flight (a chunk's working arrays are 1-2 MB), so that this
        # process, which takes back the chunks still queued, and the children are never idle
        for (q0, q1), part in zip(bounds, ordered_map(_supervise_task, bounds, pool, ahead=4 * workers)):
            if isinstance(part, _OutsideGraph):
                raise part.error(split)
            labels.append(part[0])
            hops.append(part[1])
            chains_raw += part[2]
            chains_filtered += part[3]
            capped += part[4]
            advance(q1 - q0)
    label = np.concatenate(labels) if labels else np.zeros(0, dtype=bool)
    hop = np.concatenate(hops) if hops else np.zeros(0, dtype=np.int64)
    num_no_path = int((hop < 0).sum())
    log.info(
        "supervision: %d questions, %d without a path, %d positives, %d hit the chain cap (%.2fs)",
        len(split),
        num_no_path,
        int(label.sum()),
        capped,
        time.perf_counter() - t0,
    )
    return Supervision(
        triple_label=torch.from_numpy(label),
        hops=torch.from_numpy(hop),
        chains_raw=chains_raw,
        chains_filtered=chains_filtered,
        num_no_path=num_no_path,
        num_chains_capped=capped,
        max_chains=max_chains,
    )


def _supervise_task(bounds: tuple[int, int]) -> tuple | _OutsideGraph:
    """`_supervise_range` of one chunk, on the arrays of the `fork_pool` it runs under."""
    ent_ptr, edge_ptr, edge_index, rel, topic_mask, answer_mask, max_chains = shared()
    return _supervise_range(*bounds, ent_ptr, edge_ptr, edge_index, rel, topic_mask, answer_mask, max_chains)


def _supervise_range(q0, q1, ent_ptr, edge_ptr, edge_index, rel, topic_mask, answer_mask, max_chains):
    """`_supervise` of questions ``[q0, q1)`` (local ids, the chunk's edges widened to int64),
    or the chunk's first edge outside its graph."""
    n0, n1, e0, e1 = ent_ptr[q0], ent_ptr[q1], edge_ptr[q0], edge_ptr[q1]
    c_ent_ptr, c_edge_ptr = ent_ptr[q0 : q1 + 1] - n0, edge_ptr[q0 : q1 + 1] - e0
    outside = _outside_graph(q0, c_ent_ptr, c_edge_ptr, edge_index[0, e0:e1], edge_index[1, e0:e1])
    if outside is not None:
        return outside
    offsets = np.repeat(c_ent_ptr[:-1], np.diff(c_edge_ptr))
    return _supervise(
        c_ent_ptr,
        edge_index[0, e0:e1].astype(np.int64) + offsets,
        edge_index[1, e0:e1].astype(np.int64) + offsets,
        rel[e0:e1].astype(np.int64),
        topic_mask[n0:n1],
        answer_mask[n0:n1],
        max_chains,
    )


def _chunks(split: SplitGraphs, chunk_states: int) -> list[tuple[int, int]]:
    """Consecutive question ranges of at most ``chunk_states`` BFS states (>= 1 question)."""
    num_q = len(split)
    topics = torch.from_numpy(segment_sum(split.topic_mask.numpy(), split.ent_ptr.numpy()))  # mmap, read in place
    cost = (torch.maximum(split.num_entities * topics, split.num_edges)).numpy()
    cum = np.concatenate([[0], np.cumsum(cost)])
    bounds, q0 = [], 0
    while q0 < num_q:
        q1 = int(np.searchsorted(cum, cum[q0] + chunk_states, side="right")) - 1
        q1 = min(max(q1, q0 + 1), num_q)
        bounds.append((q0, q1))
        q0 = q1
    return bounds


def _supervise(ent_ptr, head, tail, rel, topic_mask, answer_mask, max_chains):
    """Labels, hops and chains of one chunk (node ids offset by ``ent_ptr``, from 0)."""
    num_q, num_nodes = len(ent_ptr) - 1, int(ent_ptr[-1])
    node_question = np.repeat(np.arange(num_q, dtype=np.int64), np.diff(ent_ptr))
    out_adj = Adjacency.build(head, tail, num_nodes)
    in_adj = Adjacency.build(tail, head, num_nodes)

    # one BFS instance per topic entity, forward (dist from q) and backward (dist to q)
    topics = np.flatnonzero(topic_mask)
    inst_question = node_question[topics]
    shift, num_states = instance_shift(ent_ptr, inst_question)
    dist_from = batched_bfs(out_adj, topics, shift, num_states)
    dist_to = batched_bfs(in_adj, topics, shift, num_states)

    # per (topic, answer) pair: which direction is kept
    answers = np.flatnonzero(answer_mask)
    pair_inst, pair_ans = _pairs(ent_ptr, node_question, inst_question, topics, answers)
    state = pair_ans + shift[pair_inst]
    fwd_len, bwd_len = dist_from[state].astype(np.int64), dist_to[state].astype(np.int64)
    distinct = pair_ans != topics[pair_inst]
    has_fwd, has_bwd = distinct & (fwd_len > 0), distinct & (bwd_len > 0)
    keep_fwd = has_fwd & (~has_bwd | (fwd_len <= bwd_len))
    keep_bwd = has_bwd & (~has_fwd | (bwd_len <= fwd_len))

    big = np.iinfo(np.int64).max
    pair_len = np.full(len(state), big, dtype=np.int64)
    pair_len[keep_bwd] = bwd_len[keep_bwd]
    pair_len[keep_fwd] = fwd_len[keep_fwd]  # equal to bwd_len when both are kept
    hops = np.full(num_q, big, dtype=np.int64)
    np.minimum.at(hops, inst_question[pair_inst], pair_len)
    topic_is_answer = np.zeros(num_q, dtype=bool)
    topic_is_answer[inst_question[pair_inst[~distinct]]] = True
    hops = np.where(hops < big, hops, np.where(topic_is_answer, 0, -1))

    # edges on kept paths: sweep back from the kept answers through the BFS layers
    fwd = pair_inst[keep_fwd], pair_ans[keep_fwd]
    bwd = pair_inst[keep_bwd], pair_ans[keep_bwd]
    f_inst, f_edge = dag_sweep(in_adj, dist_from, shift, *fwd)
    b_inst, b_edge = dag_sweep(out_adj, dist_to, shift, *bwd)
    label = np.zeros(len(rel), dtype=bool)
    label[f_edge] = True
    label[b_edge] = True

    chains_raw, chains_filtered, capped = _chains(
        num_q,
        inst_question,
        topics,
        head,
        tail,
        rel,
        (f_inst, f_edge, *fwd),
        (b_inst, b_edge, *bwd),
        max_chains,
    )
    return label, hops, chains_raw, chains_filtered, capped


def _group(inst: np.ndarray, *columns: np.ndarray) -> dict[int, list[tuple]]:
    """Rows grouped by instance id, as Python tuples (only labelled edges, so small)."""
    out: dict[int, list[tuple]] = defaultdict(list)
    for row in zip(inst.tolist(), *(c.tolist() for c in columns)):
        out[row[0]].append(row[1:])
    return out


_Walks = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # instance, edge, target instance, target node


def _chains(
    num_q: int,
    inst_question: np.ndarray,
    topics: np.ndarray,
    head: np.ndarray,
    tail: np.ndarray,
    rel: np.ndarray,
    fwd: _Walks,
    bwd: _Walks,
    max_chains: int,
) -> tuple[list[list[Chain]], list[list[Chain]], int]:
    """Relation chains per question, read from the topic entity (see module docstring)."""
    f_inst, f_edge, ft_inst, ft_node = fwd
    b_inst, b_edge, bt_inst, bt_node = bwd
    # forward: walk head -> tail; backward: walk from q against the edges (tail -> head)
    f_steps = _group(f_inst, head[f_edge], rel[f_edge], tail[f_edge])
    b_steps = _group(b_inst, tail[b_edge], rel[b_edge], head[b_edge])
    f_targets = _group(ft_inst, ft_node)
    b_targets = _group(bt_inst, bt_node)
    per_q_fwd: list[list[list[Chain]]] = [[] for _ in range(num_q)]
    per_q_bwd: list[list[list[Chain]]] = [[] for _ in range(num_q)]
    capped_q = np.zeros(num_q, dtype=bool)
    for steps_by_inst, targets_by_inst, out in (
        (f_steps, f_targets, per_q_fwd),
        (b_steps, b_targets, per_q_bwd),
    ):
        for inst, targets in targets_by_inst.items():
            steps: dict[int, list[tuple[int, int]]] = defaultdict(list)
            for near, r, far in steps_by_inst.get(inst, ()):
                steps[near].append((r, far))
            q = int(inst_question[inst])
            chains, capped = walk_chains(int(topics[inst]), steps, {t for (t,) in targets}, max_chains)
            out[q].append(chains)
            capped_q[q] |= capped
    chains_raw, chains_filtered = [], []
    for q in range(num_q):
        raw, raw_capped = merge_chains(per_q_fwd[q] + per_q_bwd[q], max_chains)
        filtered, _ = merge_chains(per_q_fwd[q], max_chains)
        chains_raw.append(raw)
        chains_filtered.append(filtered)
        capped_q[q] |= raw_capped
    return chains_raw, chains_filtered, int(capped_q.sum())


# ----------------------------------------------------------------------------- caching


def _split_fingerprint(split: SplitGraphs) -> str:

    h = hashlib.sha256()
    for name in ("ent_ptr", "edge_ptr", "edge_index", "edge_rel", "topic_mask", "answer_mask"):
        h.update(getattr(split, name).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def supervision_key(index: KGIndex, split: str, max_chains: int) -> str:
    """Cache key: the index key (or the split's content when the index has none) + options."""
    base = index.key or _split_fingerprint(index[split])
    return stable_hash("supervision", SUPERVISION_FORMAT, base, split, int(max_chains))


class StaleSupervision(RuntimeError):
    pass


def save_supervision(sup: Supervision, path: str | Path, key: str) -> None:
    """Write ``<path>`` (tensors + chains) then ``<path>.json`` (size + checksum) last."""
    path = Path(path)
    with atomic_write(path, "wb") as f:
        torch.save(sup.to_state(), f)
    write_json(
        path.with_suffix(".json"),
        {
            "format": SUPERVISION_FORMAT,
            "key": key,
            "bytes": path.stat().st_size,
            "sha256": file_digest(path),
            "num_questions": int(sup.hops.numel()),
            "num_edges": int(sup.triple_label.numel()),
        },
    )


def load_supervision(path: str | Path, key: str | None = None, split: SplitGraphs | None = None) -> Supervision:
    """Load a saved supervision; raise `StaleSupervision` if stale, truncated or damaged."""
    path = Path(path)
    meta = cache_meta(path.with_suffix(".json"), SUPERVISION_FORMAT, key, path, StaleSupervision)
    if not path.exists() or path.stat().st_size != meta.get("bytes"):
        raise StaleSupervision(f"{path}: missing or truncated")
    if file_digest(path) != meta.get("sha256"):
        raise StaleSupervision(f"{path}: content does not match its checksum")
    try:
        # mmap: the label array is paged in from the cache file and shared by DDP ranks
        sup = Supervision(**torch.load(path, weights_only=True, mmap=True))
    except Exception as e:
        raise StaleSupervision(f"{path}: cannot be read ({e})") from e
    if split is not None and (sup.triple_label.numel() != int(split.edge_ptr[-1]) or sup.hops.numel() != len(split)):
        raise StaleSupervision(f"{path}: sizes do not match the split")
    return sup


def get_supervision(
    index: KGIndex,
    split: str,
    cache_dir: str | Path | None = None,
    max_chains: int = DEFAULT_MAX_CHAINS,
    workers: int | None = None,
) -> Supervision:
    """The cached supervision of ``index[split]``: loaded when valid, else built and saved
    (``workers``: see `build_supervision`; not in the cache key, the output is the same)."""
    graphs = index[split]
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = supervision_key(index, split, max_chains)
    path = cache_dir / "supervision" / f"{split}-{key}.pt"
    if path.exists() or path.with_suffix(".json").exists():
        try:
            sup = load_supervision(path, key, graphs)
            log.info("supervision[%s] loaded from %s", split, path)
            return sup
        except StaleSupervision as e:
            log.warning("rebuilding supervision: %s", e)
    sup = build_supervision(graphs, max_chains=max_chains, workers=workers)
    save_supervision(sup, path, key)
    return sup


# ----------------------------------------------------------------------------- names


def _relation_names(relations: KGIndex | Sequence[str]) -> Sequence[str]:
    return relations.relations if isinstance(relations, KGIndex) else relations


def chain_names(chain: Sequence[int], relations: KGIndex | Sequence[str]) -> tuple[str, ...]:
    """A relation-id chain as relation names."""
    names = _relation_names(relations)
    return tuple(names[r] for r in chain)


def chains_to_names(
    chains: Sequence[Sequence[Sequence[int]]], relations: KGIndex | Sequence[str]
) -> list[list[tuple[str, ...]]]:
    """Per-question relation-id chains (``Supervision.chains_raw`` ...) as relation names."""
    names = _relation_names(relations)
    return [[tuple(names[r] for r in c) for c in per_q] for per_q in chains]
