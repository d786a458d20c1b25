"""Transfer to relations a model never saw in a training chain: which test questions need them,
and a "leave relations out" split that makes many of them.

* `vocabulary_groups`: a question with ground chains is *seen* when one of its ground chains
  uses only relations of the training chains (a closed-vocabulary model can match it), *unseen*
  otherwise (it cannot).
* `held_out_relations` picks a fixed share of relation names by a hash of the name (the same
  relations on every machine and run), and `drop_questions_using` removes every training or
  validation question whose ground or LLM chains use one, so the test questions that need them
  measure transfer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gsr_train.io import stable_hash

HASH_BUCKETS = 1_000_000


def held_out_relations(relations: Iterable[str], fraction: float, seed: int = 0) -> set[str]:
    """The relations whose name hashes into the lowest ``fraction`` of buckets."""
    if not 0.0 <= float(fraction) < 1.0:
        raise ValueError(f"held-out relation fraction must be in [0, 1), got {fraction}")
    cut = int(float(fraction) * HASH_BUCKETS)
    return {r for r in set(relations) if int(stable_hash("holdout", int(seed), r), 16) % HASH_BUCKETS < cut}


def uses_any(chains: Iterable[Sequence[str]], relations: set[str]) -> bool:
    return any(r in relations for chain in chains for r in chain)


def drop_questions_using(questions: Sequence, held: set[str], extra_chains: dict | None = None) -> tuple[list, int]:
    """The questions none of whose chains (training, ground and ``extra_chains[id]``) use a held-out
    relation, and how many were dropped."""
    kept = [q for q in questions if not uses_any([*q.chains, *q.ground, *((extra_chains or {}).get(q.id) or [])], held)]
    return kept, len(questions) - len(kept)


def vocabulary_groups(ground: Sequence[Sequence[Sequence[str]]], seen: Iterable[str]) -> dict[str, list[int]]:
    """Positions of the questions with ground chains, by whether one chain uses only ``seen`` relations."""
    seen = set(seen)
    groups: dict[str, list[int]] = {"seen": [], "unseen": []}
    for i, chains in enumerate(ground):
        if not chains:
            continue
        closed = any(all(r in seen for r in chain) for chain in chains)
        groups["seen" if closed else "unseen"].append(i)
    return groups
