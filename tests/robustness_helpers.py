"""Toy KGQA data for the robustness / classic retriever tests (random graphs, seconds, no network)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from gsr_train.kg.index import build_index

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
RELS = [
    "film.film.directed_by",
    "people.person.nationality",
    "people.person.place_of_birth",
    "music.artist.genre",
    "sports.team.sport",
    "location.location.containedby",
    "people.person.spouse_s",
    "education.school.alumni",
]


def toy_rows(
    n_questions: int = 4, n_entities: int = 25, n_edges: int = 70, seed: int = 0, relations: list[str] | None = None
) -> list[dict]:
    """Random graphs with one topic entity and one answer two hops away (a gold path exists)."""
    rng = random.Random(seed)
    rels = relations or RELS
    rows = []
    for q in range(n_questions):
        ents = [f"Entity {q}-{i}" for i in range(n_entities)]
        triples = {(ents[0], rels[0], ents[1]), (ents[1], rels[1], ents[2])}
        while len(triples) < n_edges:
            h, t = rng.sample(ents, 2)
            triples.add((h, rng.choice(rels), t))
        rows.append(
            {
                "id": f"q{q}",
                "question": f"what is the {rels[1].split('.')[-1]} of entity {q}",
                "answer": [ents[2]],
                "q_entity": [ents[0]],
                "a_entity": [ents[2]],
                "graph": [list(t) for t in sorted(triples)],
                "choices": [],
            }
        )
    return rows


def toy_index(tmp_path: Path, **kwargs):
    folder = tmp_path / "data"
    folder.mkdir(exist_ok=True)
    with open(folder / "test.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in toy_rows(**kwargs))
    index = build_index(folder, ("test",))
    index.key = "toy"
    return index


def undirected_neighbours(split, q: int) -> dict[int, set[int]]:
    g = split.graph(q)
    nb: dict[int, set[int]] = {}
    for h, t in g.edge_index.T.tolist():
        nb.setdefault(h, set()).add(t)
        nb.setdefault(t, set()).add(h)
    return nb


def triples_of(split, q: int) -> list[tuple[int, int, int]]:
    g = split.graph(q)
    return [(h, r, t) for (h, t), r in zip(g.edge_index.T.tolist(), g.edge_rel.tolist())]


def per_question(mask: torch.Tensor, split) -> torch.Tensor:
    return torch.zeros(len(split), dtype=torch.long).index_add_(0, split.edge_question(), mask.long())
