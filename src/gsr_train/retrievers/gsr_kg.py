"""GSR's chains executed on the whole-KG store instead of each question's graph: the first ``top_n``
chains of a question that reach an entity from its topic entities give the triples on their complete
walks, each scored by its chain's score (as :class:`~gsr_train.retrievers.gsr_chains.GSRChains` scores
a question graph's edges). Chains name relations; one the store lacks is not executable."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gsr_train.kg.store import KGStore
from gsr_train.kg.store_walk import StoreWalker

Beam = tuple[Sequence[str] | None, float]  # (relation names, score); None: not a KG chain


@dataclass
class StoreChainRun:
    """Per question: the store edges retrieved and their scores (best chain first), and the cost."""

    edges: list[np.ndarray] = field(default_factory=list)
    scores: list[np.ndarray] = field(default_factory=list)
    answers: list[np.ndarray] = field(default_factory=list)  # entities the kept chains reach
    seconds: list[float] = field(default_factory=list)
    valid_top: int = 0
    total_top: int = 0
    truncated: int = 0

    def summary(self, top_n: int) -> dict:
        n = len(self.seconds)
        return {
            "questions": n,
            f"valid@{top_n}": round(self.valid_top / max(self.total_top, 1), 4),
            "truncated_walks": self.truncated,
            "ms_per_question": round(1000 * sum(self.seconds) / max(n, 1), 3),
            "mean_triples": round(sum(e.size for e in self.edges) / max(n, 1), 2),
        }


def gsr_store_retrieve(
    store: KGStore,
    topics: Sequence[np.ndarray],
    beams: Sequence[Sequence[Beam]],
    top_n: int = 3,
    max_edges: int = 200_000,
) -> StoreChainRun:
    """Execute each question's beams (best first) from ``topics[q]`` (store entity ids) on the store."""
    if len(topics) != len(beams):
        raise ValueError(f"{len(topics)} topic lists for {len(beams)} questions' beams")
    walker = StoreWalker(store, max_edges)
    run = StoreChainRun()
    for q, per_q in enumerate(beams):
        t0 = time.perf_counter()
        taken: list[tuple[np.ndarray, float]] = []
        reached: list[np.ndarray] = []
        kept = 0
        for rank, (chain, score) in enumerate(per_q):
            ids = None if chain is None else [store.relations.get(r) for r in chain]
            walk = None if ids is None or None in ids else walker.chain(topics[q], tuple(ids))  # type: ignore[arg-type]
            valid = walk is not None and walk.valid
            if rank < top_n:
                run.valid_top += valid
                run.total_top += 1
            if not valid or kept >= top_n:
                continue
            kept += 1
            run.truncated += walk.truncated  # type: ignore[union-attr]
            reached.append(walk.ends)  # type: ignore[union-attr]
            taken.append((walk.edges, float(score)))  # type: ignore[union-attr]
        edges, scores = _best_scores(taken)
        run.edges.append(edges)
        run.scores.append(scores)
        run.answers.append(np.unique(np.concatenate(reached)) if reached else np.zeros(0, dtype=np.int64))
        run.seconds.append(time.perf_counter() - t0)
    return run


def _best_scores(taken: list[tuple[np.ndarray, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Each edge once with the best score of the chains that walk it; best first, ties by edge id."""
    if not taken:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    edges = np.concatenate([e for e, _ in taken])
    scores = np.concatenate([np.full(e.size, s) for e, s in taken])
    order = np.lexsort((-scores, edges))
    first = np.ones(order.size, dtype=bool)
    first[1:] = edges[order][1:] != edges[order][:-1]
    edges, scores = edges[order][first], scores[order][first]
    rank = np.lexsort((edges, -scores))
    return edges[rank], scores[rank]
