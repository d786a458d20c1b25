"""Batched breadth-first search over many small graphs at once (numpy, no per-node loops).

Shortest-path supervision needs a BFS from every topic entity of every question. Running
them one by one in Python (or with networkx) costs milliseconds per source; here all
sources ("instances") advance together, one vectorised frontier expansion per BFS level.

* The graphs of a split are concatenated: node ``g`` is ``ent_ptr[q] + local id``.
  `Adjacency` is a CSR over those global ids, in one edge direction.
* Every instance owns a private copy of its question's node range in one flat state
  array: ``state = g + shift[instance]``. So instances never see each other's visits,
  and a level costs only the edges leaving the current frontier.
* `dag_sweep` walks back from target nodes through the BFS layers to find every
  edge on a shortest source->target path (the per-pair test
  ``dist_s[h] + 1 + dist_to_t[t] == d`` evaluated for all targets of an instance at once).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

UNREACHED = -1


@dataclass(frozen=True)
class Adjacency:
    """CSR adjacency: node ``v`` has edges ``edge[ptr[v]:ptr[v+1]]`` leading to ``far[...]``."""

    ptr: np.ndarray  # [num_nodes + 1]
    edge: np.ndarray  # [num_edges] edge id, grouped by near end
    far: np.ndarray  # [num_edges] node at the other end

    @classmethod
    def build(cls, near: np.ndarray, far: np.ndarray, num_nodes: int) -> Adjacency:
        """Group edges by their ``near`` end (order within a node is irrelevant: quicksort)."""
        near = np.asarray(near, dtype=np.int64)
        far = np.asarray(far, dtype=np.int64)
        order = np.argsort(near, kind="quicksort")
        ptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(near, minlength=num_nodes), out=ptr[1:])
        return cls(ptr=ptr, edge=order, far=far[order])

    def expand(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All edges leaving ``nodes``: (index into ``nodes``, position in ``edge`` / ``far``)."""
        starts = self.ptr[nodes]
        counts = self.ptr[nodes + 1] - starts
        owner = np.repeat(np.arange(len(nodes), dtype=np.int64), counts)
        first = np.cumsum(counts) - counts
        pos = np.arange(int(counts.sum()), dtype=np.int64) - first[owner] + starts[owner]
        return owner, pos


def instance_shift(ent_ptr: np.ndarray, inst_question: np.ndarray) -> tuple[np.ndarray, int]:
    """Per-instance offset into the flat state array, and its total size."""
    sizes = ent_ptr[inst_question + 1] - ent_ptr[inst_question]
    starts = np.cumsum(sizes) - sizes
    return starts - ent_ptr[inst_question], int(sizes.sum())


def _unique_states(inst: np.ndarray, node: np.ndarray, shift: np.ndarray, slot: np.ndarray):
    """Drop repeated (instance, node) states without sorting: the last writer of a slot wins.

    ``slot`` is scratch space over the state array; only the entries written here are read.
    """
    state = node + shift[inst]
    order = np.arange(len(state), dtype=np.int64)
    slot[state] = order
    first = slot[state] == order
    return state[first], inst[first], node[first]


def batched_bfs(adj: Adjacency, sources: np.ndarray, shift: np.ndarray, num_states: int) -> np.ndarray:
    """Hop distance from each instance's source to every node of its graph.

    ``sources[i]`` is the global start node of instance ``i``. Returns ``dist`` over the
    flat state array (``UNREACHED`` where no directed path exists).
    """
    dist = np.full(num_states, UNREACHED, dtype=np.int32)
    inst = np.arange(len(sources), dtype=np.int64)
    node = np.asarray(sources, dtype=np.int64)
    dist[node + shift[inst]] = 0
    slot = np.empty(num_states, dtype=np.int64)
    level = 0
    while inst.size:
        owner, pos = adj.expand(node)
        inst, node = inst[owner], adj.far[pos]
        fresh = dist[node + shift[inst]] == UNREACHED
        state, inst, node = _unique_states(inst[fresh], node[fresh], shift, slot)
        level += 1
        dist[state] = level
    return dist


def dag_sweep(
    back: Adjacency,
    dist: np.ndarray,
    shift: np.ndarray,
    target_inst: np.ndarray,
    target_node: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Edges on shortest paths from each instance's BFS source to its targets.

    ``dist`` comes from `batched_bfs` over the opposite adjacency of ``back`` (so
    ``back`` leads from a node to its BFS predecessors' side). Starting at the targets,
    layer by layer from the deepest, every edge into a marked node from the previous layer
    is on a shortest path and its far end gets marked. Returns ``(instance, edge id)``
    pairs, each at most once.
    """
    target_inst = np.asarray(target_inst, dtype=np.int64)
    target_node = np.asarray(target_node, dtype=np.int64)
    empty = np.zeros(0, dtype=np.int64)
    if target_inst.size == 0:
        return empty, empty
    levels = dist[target_node + shift[target_inst]].astype(np.int64)
    if (levels <= 0).any():
        raise ValueError("dag_sweep: every target must be reachable and differ from its source")
    order = np.argsort(-levels, kind="stable")
    target_inst, target_node, levels = target_inst[order], target_node[order], levels[order]
    bounds = {int(lv): (int(a), int(b)) for lv, a, b in _runs(levels)}
    out_inst, out_edge = [], []
    carry_inst, carry_node = empty, empty
    slot = np.empty(len(dist), dtype=np.int64)
    for level in range(int(levels[0]), 0, -1):
        a, b = bounds.get(level, (0, 0))
        inst = np.concatenate([target_inst[a:b], carry_inst])
        node = np.concatenate([target_node[a:b], carry_node])
        _, inst, node = _unique_states(inst, node, shift, slot)
        owner, pos = back.expand(node)
        inst, far = inst[owner], back.far[pos]
        on_path = dist[far + shift[inst]] == level - 1
        out_inst.append(inst[on_path])
        out_edge.append(back.edge[pos[on_path]])
        carry_inst, carry_node = inst[on_path], far[on_path]
    return np.concatenate(out_inst), np.concatenate(out_edge)


def _runs(sorted_values: np.ndarray):
    """(value, start, stop) of each run of equal values in a sorted array."""
    change = np.flatnonzero(np.diff(sorted_values)) + 1
    starts = np.concatenate([[0], change])
    stops = np.concatenate([change, [len(sorted_values)]])
    return zip(sorted_values[starts].tolist(), starts.tolist(), stops.tolist())
