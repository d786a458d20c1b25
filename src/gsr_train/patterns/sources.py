"""Patterns without an LLM: GSR chains (a trained retriever's output) and gold chains (oracle).

A chain ``(topic, [r1, r2, ...])`` becomes the path pattern ``topic -r1- ?x1 -r2- ?x2 ...``
with the topic linked to its entity and the relations linked to their KG ids. Gold chains
are the shortest-path relation chains of the weak supervision (``Supervision.chains_filtered``,
read from the topic entity; ``raw`` adds the answer-to-topic ones), so matching them gives
an upper bound for pattern-based retrieval with perfect patterns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gsr_train.io import iter_jsonl
from gsr_train.kg.index import KGIndex
from gsr_train.patterns.pattern import Pattern, path_pattern


@dataclass
class SourceStats:
    questions: int = 0
    patterns: int = 0
    no_pattern: int = 0
    skipped: dict = field(default_factory=dict)  # reason -> count
    examples: list = field(default_factory=list)

    def skip(self, reason: str, example: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if len(self.examples) < 10:
            self.examples.append(example)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def chain_patterns_from_results(
    path: str | Path,
    index: KGIndex,
    split_name: str,
    max_chains: int = 3,
    stats: SourceStats | None = None,
    skip_unknown: bool = False,
) -> list[list[Pattern]]:
    """Per question of the split, path patterns from a results file's ``chains`` (best first).

    Rows for ids outside the split are an error naming file and line (``skip_unknown``:
    counted in ``stats.skipped`` instead, for files covering more questions); chains naming an
    entity or relation unknown to the KG are skipped and counted (``stats.skipped``).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (a GSR results file with 'chains')")
    split = index[split_name]
    position = split.position()
    ent, rel = index.entity_lookup(), index.relation_lookup()
    stats = stats if stats is not None else SourceStats()
    out: list[list[Pattern]] = [[] for _ in range(len(split))]
    for lineno, row in iter_jsonl(path):
        if isinstance(row, json.JSONDecodeError) or not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise ValueError(f"{path}: line {lineno}: expected a JSON object with a string 'id'")
        q = position.get(row["id"])
        if q is None:
            if skip_unknown:
                stats.skip("id not in split", f"{path}: line {lineno}: id {row['id']!r}")
                continue
            raise ValueError(f"{path}: line {lineno}: id {row['id']!r} is not in split {split_name!r}")
        chains = row.get("chains") or []
        if not isinstance(chains, list):
            raise ValueError(f"{path}: line {lineno} (id {row['id']!r}): 'chains' must be a list")
        for c in chains[:max_chains]:
            where = f"{path}: line {lineno} (id {row['id']!r})"
            if not isinstance(c, dict) or not isinstance(c.get("chain"), list) or not c["chain"]:
                stats.skip("malformed chain", f"{where}: {c!r}")
                continue
            topic = c.get("topic")
            if topic is None or topic not in ent:
                stats.skip("unknown topic", f"{where}: topic {topic!r}")
                continue
            found = [rel.get(r) for r in c["chain"]]
            ids = [i for i in found if i is not None]
            if len(ids) < len(found):
                stats.skip("unknown relation", f"{where}: chain {c['chain']!r}")
                continue
            out[q].append(
                path_pattern(topic, c["chain"], ent[topic], ids, source="gsr", score=float(c.get("score", 0.0)))
            )
    stats.questions += len(split)
    stats.patterns += sum(len(p) for p in out)
    stats.no_pattern += sum(not p for p in out)
    return out


def gold_patterns(
    index: KGIndex,
    split_name: str,
    chains: Sequence[Sequence[Sequence[int]]],
    max_chains: int = 3,
    stats: SourceStats | None = None,
) -> list[list[Pattern]]:
    """Oracle path patterns: ``chains[q]`` (relation-id tuples, e.g. ``Supervision.chains_filtered``)
    read from each topic entity of question ``q`` (at most ``max_chains`` patterns per question)."""
    split = index[split_name]
    if len(chains) != len(split):
        raise ValueError(f"need one chain list per question ({len(split)}), got {len(chains)}")
    stats = stats if stats is not None else SourceStats()
    out: list[list[Pattern]] = []
    for q in range(len(split)):
        n0, n1 = int(split.ent_ptr[q]), int(split.ent_ptr[q + 1])
        topics = split.entity_ids[n0:n1][split.topic_mask[n0:n1]].tolist()
        pats = []
        for chain in chains[q]:
            if not chain:
                continue
            for t in topics:
                pats.append(
                    path_pattern(index.entities[t], [index.relations[r] for r in chain], t, list(chain), source="gold")
                )
        out.append(pats[:max_chains])
    stats.questions += len(split)
    stats.patterns += sum(len(p) for p in out)
    stats.no_pattern += sum(not p for p in out)
    return out
