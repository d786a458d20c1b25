"""Execute relation chains on the per-question graphs of a `SplitGraphs`.

A GSR subgraph id is ``(topic entity, relation chain)``: starting from the topic entities,
each relation is followed in *both* edge directions (as the paper's evaluation does; the
fixtures' edge directions are unreliable anyway), giving a frontier of entities per hop.
A chain is *valid* when its last frontier is non-empty.

*Shortest* chains (``allowed_relations(..., shortest=True)``): every hop must reach an entity
one hop farther from the topic than the hop before (hop distances of the question graph,
same direction rule), so the chain has at least one realisation that is a shortest path.
Ground chains are shortest topic -> answer paths by construction; a chain that only walks
back towards the topic (``A -r-> B -r-> A``) retrieves nothing new.

Each step is one tensor operation over the question's edges (no loop per triple). A
backward sweep then keeps only the edges that lie on a complete walk (topic -> ... -> end),
which is the retrieved triple set. Frontiers are memoised per (question, prefix), so the
KG-constrained decoder asks "which relations can follow this prefix?" in O(E) once per
distinct prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from gsr_train.kg.index import SplitGraphs

DIRECTIONS = ("both", "forward")


@dataclass
class ChainWalk:
    """The result of executing one chain from the topic entities of one question."""

    question: int
    chain: tuple[int, ...]  # global relation ids
    valid: bool
    frontiers: list[torch.Tensor]  # hop j: BoolTensor[N] entities reached after j hops (j = 0..k)
    step_edges: list[torch.Tensor] = field(default_factory=list)  # hop j: local edge ids on complete walks
    step_forward: list[torch.Tensor] = field(default_factory=list)  # hop j: edge usable head->tail
    step_backward: list[torch.Tensor] = field(default_factory=list)  # hop j: edge usable tail->head
    starts: torch.Tensor | None = None  # local ids of topic entities that begin a complete walk
    ends: torch.Tensor | None = None  # local ids of the entities the chain reaches

    def edges(self) -> torch.Tensor:
        """Local edge ids of the walk, in hop order (an edge used at two hops appears twice)."""
        if not self.step_edges:
            return torch.zeros(0, dtype=torch.long)
        return torch.cat(self.step_edges)


class _Graph:
    __slots__ = ("head", "tail", "rel", "topic", "num_nodes", "offset")

    def __init__(self, head, tail, rel, topic, offset):
        self.head, self.tail, self.rel, self.topic = head, tail, rel, topic
        self.num_nodes = int(topic.numel())
        self.offset = offset


class ChainExecutor:
    """Chain execution, validity and next-relation sets on one split's local graphs.

    ``direction="both"`` follows a relation head->tail and tail->head (the paper's rule);
    ``"forward"`` only head->tail. ``cache_size`` bounds the memoised frontiers per question.
    """

    def __init__(self, split: SplitGraphs, direction: str = "both", cache_size: int = 4096) -> None:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        self.split = split
        self.direction = direction
        self.cache_size = int(cache_size)
        self._graphs: dict[int, _Graph] = {}
        self._frontiers: dict[int, dict[tuple[int, ...], torch.Tensor]] = {}
        self._distances: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.split)

    # ------------------------------------------------------------------ per question
    def graph(self, q: int) -> _Graph:
        g = self._graphs.get(q)
        if g is None:
            if not 0 <= q < len(self.split):
                raise IndexError(f"question {q} out of range (split has {len(self.split)})")
            n0, n1 = int(self.split.ent_ptr[q]), int(self.split.ent_ptr[q + 1])
            e0, e1 = int(self.split.edge_ptr[q]), int(self.split.edge_ptr[q + 1])
            ei = self.split.edge_index[:, e0:e1]
            g = _Graph(ei[0], ei[1], self.split.edge_rel[e0:e1], self.split.topic_mask[n0:n1], e0)
            self._graphs[q] = g
        return g

    def _step(self, g: _Graph, frontier: torch.Tensor, rel: int) -> torch.Tensor:
        """Entities reached from ``frontier`` by one edge of relation ``rel``."""
        on_rel = g.rel == rel
        nxt = torch.zeros(g.num_nodes, dtype=torch.bool)
        fwd = on_rel & frontier[g.head]
        nxt[g.tail[fwd]] = True
        if self.direction == "both":
            bwd = on_rel & frontier[g.tail]
            nxt[g.head[bwd]] = True
        return nxt

    def frontier(self, q: int, prefix: Sequence[int]) -> torch.Tensor:
        """BoolTensor[N]: entities reached from the topic entities by ``prefix`` (memoised)."""
        prefix = tuple(int(r) for r in prefix)
        cache = self._frontiers.setdefault(q, {})
        hit = cache.get(prefix)
        if hit is not None:
            return hit
        g = self.graph(q)
        if not prefix:
            out = g.topic.clone()
        else:
            parent = self.frontier(q, prefix[:-1])
            out = self._step(g, parent, prefix[-1]) if bool(parent.any()) else parent
        if len(cache) >= self.cache_size:
            cache.clear()
        cache[prefix] = out
        return out

    def distances(self, q: int) -> torch.Tensor:
        """LongTensor[N]: hops from the nearest topic entity (``-1``: unreachable), memoised.

        One frontier expansion over all edges per hop, following the executor's direction rule."""
        hit = self._distances.get(q)
        if hit is not None:
            return hit
        g = self.graph(q)
        dist = torch.full((g.num_nodes,), -1, dtype=torch.long)
        front = g.topic.clone()
        dist[front] = 0
        hop = 0
        while bool(front.any()):
            hop += 1
            reached = torch.zeros(g.num_nodes, dtype=torch.bool)
            reached[g.tail[front[g.head]]] = True
            if self.direction == "both":
                reached[g.head[front[g.tail]]] = True
            front = reached & (dist < 0)
            dist[front] = hop
        self._distances[q] = dist
        return dist

    def allowed_relations(self, q: int, prefix: Sequence[int], shortest: bool = False) -> torch.Tensor:
        """Sorted global relation ids that can extend ``prefix`` with a non-empty frontier.

        ``shortest``: only relations with an edge from an entity of the frontier at distance
        ``len(prefix)`` to one at distance ``len(prefix) + 1`` (so every hop moves away from the topic)."""
        g = self.graph(q)
        front = self.frontier(q, prefix)
        if shortest:
            dist = self.distances(q)
            hop = len(prefix)
            front = front & (dist == hop)
            farther = dist == hop + 1
            touch = front[g.head] & farther[g.tail]
            if self.direction == "both":
                touch = touch | (front[g.tail] & farther[g.head])
            return torch.unique(g.rel[touch])
        touch = front[g.head]
        if self.direction == "both":
            touch = touch | front[g.tail]
        return torch.unique(g.rel[touch])

    def is_valid(self, q: int, chain: Sequence[int]) -> bool:
        return len(chain) > 0 and bool(self.frontier(q, chain).any())

    def clear_cache(self) -> None:
        self._frontiers.clear()
        self._distances.clear()

    # ------------------------------------------------------------------ full walks
    def execute(self, q: int, chain: Sequence[int]) -> ChainWalk:
        """Frontiers plus the edges that lie on complete topic -> end walks (backward sweep)."""
        chain = tuple(int(r) for r in chain)
        g = self.graph(q)
        fronts = [self.frontier(q, chain[:j]) for j in range(len(chain) + 1)]
        valid = len(chain) > 0 and bool(fronts[-1].any())
        walk = ChainWalk(q, chain, valid, fronts)
        if not valid:
            return walk
        alive = fronts[-1]
        steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for j in range(len(chain), 0, -1):
            before = fronts[j - 1]
            on_rel = g.rel == chain[j - 1]
            fwd = on_rel & before[g.head] & alive[g.tail]
            bwd = on_rel & before[g.tail] & alive[g.head] if self.direction == "both" else torch.zeros_like(fwd)
            use = fwd | bwd
            ids = use.nonzero().flatten()
            steps.append((ids, fwd[ids], bwd[ids]))
            alive = torch.zeros(g.num_nodes, dtype=torch.bool)
            alive[g.head[fwd]] = True
            alive[g.tail[bwd]] = True
        steps.reverse()
        walk.step_edges = [s[0] for s in steps]
        walk.step_forward = [s[1] for s in steps]
        walk.step_backward = [s[2] for s in steps]
        walk.starts = (alive & g.topic).nonzero().flatten()
        walk.ends = fronts[-1].nonzero().flatten()
        return walk

    def global_edges(self, walk: ChainWalk) -> torch.Tensor:
        """Split-level edge ids (index into ``edge_rel`` / scores ``[sum E]``) of a walk."""
        return walk.edges() + self.graph(walk.question).offset

    def paths(self, walk: ChainWalk, max_paths: int = 64) -> list[list[tuple[int, int, int, bool]]]:
        """Up to ``max_paths`` entity paths of the walk as hops ``(from, edge, to, forward)``.

        Local ids; enumeration is depth-first from each start, one tensor lookup per partial
        path, so hub relations cannot blow up the cost beyond ``max_paths``.
        """
        if not walk.valid or walk.starts is None:
            return []
        g = self.graph(walk.question)
        out: list[list[tuple[int, int, int, bool]]] = []
        k = len(walk.chain)

        def grow(node: int, j: int, acc: list) -> None:
            if len(out) >= max_paths:
                return
            if j == k:
                out.append(list(acc))
                return
            ids, fwd, bwd = walk.step_edges[j], walk.step_forward[j], walk.step_backward[j]
            heads, tails = g.head[ids], g.tail[ids]
            for pos in (fwd & (heads == node)).nonzero().flatten().tolist():
                acc.append((node, int(ids[pos]), int(tails[pos]), True))
                grow(int(tails[pos]), j + 1, acc)
                acc.pop()
                if len(out) >= max_paths:
                    return
            for pos in (bwd & (tails == node)).nonzero().flatten().tolist():
                acc.append((node, int(ids[pos]), int(heads[pos]), False))
                grow(int(heads[pos]), j + 1, acc)
                acc.pop()
                if len(out) >= max_paths:
                    return

        for s in walk.starts.tolist():
            grow(int(s), 0, [])
        return out


def verbalize_path(
    path: Sequence[tuple[int, int, int, bool]],
    walk: ChainWalk,
    split: SplitGraphs,
    entities: Sequence[str],
    relations: Sequence[str],
) -> str:
    """``e0 -> r1 -> e1 <- r2 <- e2``: arrows point along the stored edge direction."""
    n0 = int(split.ent_ptr[walk.question])
    name = lambda local: entities[int(split.entity_ids[n0 + local])]  # noqa: E731
    if not path:
        return ""
    parts = [name(path[0][0])]
    for (_, _, to, forward), rel in zip(path, walk.chain):
        arrow = "->" if forward else "<-"
        parts.extend([arrow, relations[rel], arrow, name(to)])
    return " ".join(parts)
