"""The query-graph pattern: what SimGRAG's LLM writes, what SAFE's pseudo query graph is.

Nodes are *known* (they name an entity; ``text`` is matched against entity names by
embedding, ``entity`` optionally pins the global id when the source already knows it, e.g.
the topic entity of a GSR chain) or *unknown* (``text=None``; SimGRAG matches them at zero
cost, SAFE scores them by their expected ``type``). Relations are known (``relation`` text
/ ``relation_id``) or unknown (``None``, zero cost). Edge direction is kept for display and
SAFE's schema alignment but ignored by matching, as in both papers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PatternNode:
    text: str | None = None  # None: UNKNOWN
    type: str | None = None  # expected type (SAFE), e.g. "people.person"; None: untyped
    entity: int | None = None  # global entity id when already linked (GSR / gold topic)

    @property
    def known(self) -> bool:
        return self.text is not None or self.entity is not None


@dataclass(frozen=True)
class PatternEdge:
    head: int
    tail: int
    relation: str | None = None  # None: unknown relation
    relation_id: int | None = None  # global relation id when it is a KG relation

    @property
    def known(self) -> bool:
        return self.relation is not None or self.relation_id is not None


@dataclass(frozen=True)
class Pattern:
    nodes: tuple[PatternNode, ...]
    edges: tuple[PatternEdge, ...]
    source: str = ""  # gsr | gold | llm | adj ...
    score: float = 0.0  # source's confidence (e.g. GSR beam score); informational
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        n = len(self.nodes)
        if not self.edges:
            raise ValueError("a pattern needs at least one edge")
        for i, e in enumerate(self.edges):
            if not (0 <= e.head < n and 0 <= e.tail < n):
                raise ValueError(f"pattern edge #{i} ({e.head}, {e.tail}) refers to a node outside 0..{n - 1}")
            if e.head == e.tail:
                raise ValueError(f"pattern edge #{i} is a self-loop on node {e.head}")
        seen = {0}
        frontier = [0]
        adj: dict[int, list[int]] = {}
        for e in self.edges:
            adj.setdefault(e.head, []).append(e.tail)
            adj.setdefault(e.tail, []).append(e.head)
        while frontier:
            u = frontier.pop()
            for v in adj.get(u, []):
                if v not in seen:
                    seen.add(v)
                    frontier.append(v)
        if len(seen) != n:
            raise ValueError(f"pattern is not connected (nodes {sorted(set(range(n)) - seen)} unreachable)")

    def to_dict(self) -> dict:
        return {
            "nodes": [{k: v for k, v in vars(x).items() if v is not None} for x in self.nodes],
            "edges": [[e.head, e.relation, e.tail] for e in self.edges],
            "source": self.source,
            "score": self.score,
        }

    def describe(self) -> str:
        """``(Jamaica)-[location.country.languages_spoken]-(?1)`` style one-liner."""

        def node(i: int) -> str:
            x = self.nodes[i]
            name = x.text if x.text is not None else f"?{i}"
            return f"({name}{':' + x.type if x.type else ''})"

        return ", ".join(f"{node(e.head)}-[{e.relation or '?'}]->{node(e.tail)}" for e in self.edges)


def path_pattern(
    topic: str,
    chain: Sequence[str],
    topic_id: int | None = None,
    relation_ids: Sequence[int | None] | None = None,
    types: Sequence[str | None] | None = None,
    source: str = "",
    score: float = 0.0,
) -> Pattern:
    """``topic -r1-> ?x1 -r2-> ?x2 ...``: the pattern of a relation chain read from the topic.

    ``types`` optionally gives the expected type of every node (``len(chain) + 1``).
    """
    if not chain:
        raise ValueError(f"chain from {topic!r} is empty")
    types = list(types) if types is not None else [None] * (len(chain) + 1)
    if len(types) != len(chain) + 1:
        raise ValueError(f"types must have {len(chain) + 1} entries, got {len(types)}")
    rel_ids = list(relation_ids) if relation_ids is not None else [None] * len(chain)
    nodes = [PatternNode(text=topic, type=types[0], entity=topic_id)]
    nodes += [PatternNode(type=types[i + 1]) for i in range(len(chain))]
    edges = [PatternEdge(i, i + 1, chain[i], rel_ids[i]) for i in range(len(chain))]
    return Pattern(tuple(nodes), tuple(edges), source=source, score=float(score))
