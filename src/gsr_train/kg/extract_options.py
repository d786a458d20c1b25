"""``data.extract``: how a question's graph is cut from ``data.kg`` (a module of its own, so the option
checks and ``--help`` read it without the kernels, numba or torch)."""

from __future__ import annotations

from dataclasses import dataclass

from gsr_train.config import option


@dataclass(frozen=True)
class ExtractOptions:
    """How a question's graph is cut from ``data.kg`` (``data.extract``)."""

    hops: int = option(2, "hops around the topic entities (both edge directions)", ge=1, le=4)
    max_triples: int = option(5000, "triples kept per question: those with the most PageRank flow", ge=1)
    budget_factor: int = option(4, "edges reached before pruning: at most this times max_triples", ge=1)
    alpha: float = option(0.2, "PageRank's restart probability", gt=0, lt=1)
    rounds: int = option(20, "PageRank's power iterations", ge=1)
