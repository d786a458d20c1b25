"""Prize-collecting Steiner tree subgraph retrieval (G-Retriever's recipe, via ``pcst_fast``).

Per question: node prizes and edge prizes (see `gsr_train.retrievers.classic`), one
edge cost ``c`` (lowered to just under the largest edge prize, as G-Retriever does, so a
question whose edge prizes are all small still gets edges). An edge whose prize exceeds
its cost becomes a virtual node with prize ``prize - c`` joined to both ends by free edges
(so the tree can collect edge prizes); the other edges cost ``c - prize``. ``pcst_fast``
(Goemans-Williamson with pruning) returns one tree; its real and virtual edges map back
to triples. The tree is then ordered breadth-first from its highest-prize node and cut to
``budget`` edges: every prefix of that order is connected, so the subgraph stays
connected within budget and its top-K are connected too.

The solver is one C++ call per question; inputs are sliced from split-level tensors.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import torch

from gsr_train.kg.index import SplitGraphs

_SOLVER = None


def solver():
    """``pcst_fast.pcst_fast``, checked once on a path graph: the ``pcst_fast`` 1.0.10 wheels
    return wrong vertex / edge ids under numpy >= 2 (fraenkel-lab/pcst_fast#16); the
    maintained drop-in fork ``pcst-fast2`` (same module name) does not."""
    global _SOLVER
    if _SOLVER is None:
        import pcst_fast  # lazy: an optional dependency of the PCST retriever only

        verts, edges = pcst_fast.pcst_fast(
            np.array([[0, 1], [1, 2], [2, 3]], dtype=np.int64),
            np.array([5.0, 0.0, 0.0, 5.0]),
            np.array([0.5, 0.5, 0.5]),
            -1,
            1,
            "gw",
            0,
        )
        if sorted(np.asarray(verts).tolist()) != [0, 1, 2, 3] or sorted(np.asarray(edges).tolist()) != [0, 1, 2]:
            raise RuntimeError(
                "the installed pcst_fast returns wrong ids (pcst_fast 1.0.10 with numpy >= 2, "
                "fraenkel-lab/pcst_fast#16): `pip uninstall pcst_fast && pip install pcst-fast2`"
            )
        _SOLVER = pcst_fast.pcst_fast
    return _SOLVER


def _bfs_order(nodes_h: np.ndarray, nodes_t: np.ndarray, root: int) -> list[int]:
    """Edge positions ordered by the BFS discovery of their later endpoint from ``root``
    (edges outside the root's component are left out)."""
    adj: dict[int, list[tuple[int, int]]] = {}
    for i, (a, b) in enumerate(zip(nodes_h.tolist(), nodes_t.tolist())):
        adj.setdefault(a, []).append((b, i))
        adj.setdefault(b, []).append((a, i))
    seen = {root: 0}
    queue = deque([root])
    while queue:
        u = queue.popleft()
        for v, _ in adj.get(u, []):
            if v not in seen:
                seen[v] = len(seen)
                queue.append(v)
    keyed = []
    for i, (a, b) in enumerate(zip(nodes_h.tolist(), nodes_t.tolist())):
        if a in seen and b in seen:
            keyed.append((max(seen[a], seen[b]), min(seen[a], seen[b]), i))
    keyed.sort()
    return [i for _, _, i in keyed]


def pcst_question(
    num_nodes: int,
    heads: np.ndarray,
    tails: np.ndarray,
    node_prize: np.ndarray,
    edge_prize: np.ndarray,
    edge_cost: float,
    budget: int | None = None,
    pruning: str = "gw",
) -> list[int]:
    """Local edge ids of one question's PCST subgraph, in connected (BFS) order, at most ``budget``."""
    num_e = heads.size
    if num_e == 0 or num_nodes == 0:
        return []
    c = 0.01
    cost = min(float(edge_cost), float(edge_prize.max()) * (1 - c / 2)) if edge_prize.max() > 0 else float(edge_cost)
    virtual = edge_prize > cost
    normal = np.flatnonzero(~virtual)
    virt = np.flatnonzero(virtual)
    vid = num_nodes + np.arange(virt.size)
    pairs = np.concatenate(
        [
            np.stack([heads[normal], tails[normal]], 1),
            np.stack([heads[virt], vid], 1),
            np.stack([vid, tails[virt]], 1),
        ]
    ).astype(np.int64)
    costs = np.concatenate([cost - edge_prize[normal], np.zeros(2 * virt.size)]).astype(np.float64)
    prizes = np.concatenate([node_prize, edge_prize[virt] - cost]).astype(np.float64)
    verts, sel = solver()(pairs, prizes, costs, -1, 1, pruning, 0)
    verts, sel = np.asarray(verts, dtype=np.int64), np.asarray(sel, dtype=np.int64)
    chosen = set(normal[sel[sel < normal.size]].tolist())
    chosen.update(virt[verts[verts >= num_nodes] - num_nodes].tolist())
    if not chosen:
        return []
    chosen_arr = np.fromiter(sorted(chosen), dtype=np.int64)
    h, t = heads[chosen_arr], tails[chosen_arr]
    touched = np.unique(np.concatenate([h, t]))
    root = int(touched[np.argmax(node_prize[touched])])
    order = chosen_arr[_bfs_order(h, t, root)]
    if budget is not None and budget > 0:
        order = order[: int(budget)]
    return order.tolist()


def pcst_scores(
    split: SplitGraphs,
    node_prize: torch.Tensor,
    edge_prize: torch.Tensor,
    edge_cost: float = 0.5,
    budget: int | None = 200,
    pruning: str = "gw",
) -> torch.Tensor:
    """``FloatTensor[sum E]``: minus the BFS position of every edge of each question's tree, ``-inf`` elsewhere."""
    num_e = int(split.edge_ptr[-1]) if len(split) else 0
    scores = torch.full((num_e,), -math.inf)
    ei = split.edge_index.numpy()
    npz, epz = node_prize.double().numpy(), edge_prize.double().numpy()
    eptr, nptr = split.edge_ptr.tolist(), split.ent_ptr.tolist()
    for q in range(len(split)):
        e0, e1, n0, n1 = eptr[q], eptr[q + 1], nptr[q], nptr[q + 1]
        picked = pcst_question(n1 - n0, ei[0, e0:e1], ei[1, e0:e1], npz[n0:n1], epz[e0:e1], edge_cost, budget, pruning)
        if picked:
            scores[torch.tensor(picked) + e0] = -torch.arange(len(picked), dtype=torch.float32)
    return scores
