"""Relation chains executed by a SPARQL endpoint (GSR on a KG that lives in a database).

A chain ``r1, r2, ...`` from topic entities is one query: the database joins the hops (each either way,
literals left out) and answers the complete walks, so a walk that stops early never leaves it. The
triples on those walks and the entities they end at are what `gsr_train.kg.store_walk.StoreWalker`
gives on a store imported from the same KG (the backward sweep is the join). At most
``max_walks`` walks are read; a chain with more is marked truncated, as the store's edge budget marks
it. Answers are cached by the client like every query.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gsr_train.kg.sparql import SparqlClient, chain_query

Triple = tuple[str, str, str]


@dataclass
class EndpointWalk:
    """One chain executed by the endpoint: the distinct triples on complete walks (canonical order) and
    the entities reached (sorted)."""

    chain: tuple[str, ...]
    triples: list[Triple]
    ends: list[str]
    truncated: bool

    @property
    def valid(self) -> bool:
        return bool(self.ends)


class SparqlChains:
    """Chains walked by one endpoint (see the module docstring)."""

    def __init__(self, client: SparqlClient, max_walks: int = 100_000) -> None:
        if max_walks < 1:
            raise ValueError(f"max_walks must be >= 1, got {max_walks}")
        self.client, self.max_walks = client, int(max_walks)

    def chain(self, topics: Sequence[str], relations: Sequence[str]) -> EndpointWalk:
        chain = tuple(relations)
        if not topics or not chain:
            return EndpointWalk(chain, [], [], False)
        cols = self.client.columns(chain_query(sorted(set(topics)), chain, self.max_walks))
        walks = len(cols.get("x0", []))
        truncated = walks > self.max_walks
        take = min(walks, self.max_walks)
        nodes = [np.asarray(cols.get(f"x{i}", [None] * walks)[:take], dtype=object) for i in range(len(chain) + 1)]
        heads, rels, tails = [], [], []
        for i, rel in enumerate(chain, start=1):  # a hop at a time, every walk at once
            forward = np.asarray(cols.get(f"d{i}", [None] * walks)[:take], dtype=object) == "0"
            heads.append(np.where(forward, nodes[i - 1], nodes[i]))
            tails.append(np.where(forward, nodes[i], nodes[i - 1]))
            rels.append(np.full(take, rel, dtype=object))
        if take == 0:
            return EndpointWalk(chain, [], [], truncated)
        table = np.stack([np.concatenate(c) for c in (heads, rels, tails)], axis=1).astype(str)
        triples = [tuple(t) for t in np.unique(table, axis=0).tolist()]
        return EndpointWalk(chain, triples, sorted(set(nodes[-1].tolist())), truncated)  # type: ignore[arg-type]
