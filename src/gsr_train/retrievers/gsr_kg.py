"""GSR's chains executed on the whole-KG store instead of each question's graph: the first ``top_n``
chains of a question that reach an entity from its topic entities give the triples on their complete
walks, each scored by its chain's score (as `gsr_train.retrievers.gsr_chains.GSRChains` scores
a question graph's edges). Chains name relations; one the store lacks is not executable. The same runs on
a SPARQL endpoint (`gsr_endpoint_retrieve`), the endpoint executing each chain."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gsr_train.kg.sparql_chains import SparqlChains
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
    triples: list[tuple[str, str, str]] = field(default_factory=list)  # an endpoint's run: what edges index

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
    walker = StoreWalker(store, max_edges)

    def walk(q: int, chain: Sequence[str]) -> _Walk | None:
        ids = [store.relations.get(r) for r in chain]
        if None in ids:
            return None  # a relation the store lacks: not executable
        w = walker.chain(topics[q], tuple(ids))  # type: ignore[arg-type]
        return _Walk(w.edges, w.ends, w.truncated)

    return _execute(walk, len(topics), beams, top_n)


def gsr_endpoint_retrieve(
    chains: SparqlChains, topics: Sequence[Sequence[str]], beams: Sequence[Sequence[Beam]], top_n: int = 3
) -> StoreChainRun:
    """The same on a SPARQL endpoint (topics by IRI; one query a chain, `gsr_train.kg.sparql_chains`):
    ``edges`` index ``run.triples`` (each triple numbered once), ``answers`` hold IRIs."""
    run_triples: dict[tuple[str, str, str], int] = {}

    def walk(q: int, chain: Sequence[str]) -> _Walk:
        w = chains.chain(topics[q], chain)
        ids = np.fromiter((run_triples.setdefault(t, len(run_triples)) for t in w.triples), np.int64, len(w.triples))
        return _Walk(ids, np.asarray(w.ends, dtype=object), w.truncated)

    run = _execute(walk, len(topics), beams, top_n)
    run.triples = list(run_triples)
    return run


@dataclass
class _Walk:
    edges: np.ndarray
    ends: np.ndarray
    truncated: bool


def _execute(walk, questions: int, beams: Sequence[Sequence[Beam]], top_n: int) -> StoreChainRun:
    """Each question's first ``top_n`` executable chains that reach an entity, their walks' edges scored."""
    if questions != len(beams):
        raise ValueError(f"{questions} topic lists for {len(beams)} questions' beams")
    run = StoreChainRun()
    for q, per_q in enumerate(beams):
        t0 = time.perf_counter()
        taken: list[tuple[np.ndarray, float]] = []
        reached: list[np.ndarray] = []
        kept = 0
        for rank, (chain, score) in enumerate(per_q):
            w = None if chain is None else walk(q, chain)
            valid = w is not None and w.ends.size > 0
            if rank < top_n:
                run.valid_top += valid
                run.total_top += 1
            if not valid or kept >= top_n:
                continue
            kept += 1
            run.truncated += w.truncated  # type: ignore[union-attr]
            reached.append(w.ends)  # type: ignore[union-attr]
            taken.append((w.edges, float(score)))  # type: ignore[union-attr]
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
