"""A tiny RoG-format dataset for the pattern retriever tests (hashing encoder, tmp cache)."""

from __future__ import annotations

import json
from pathlib import Path

ROWS = [
    {
        "id": "q1",
        "question": "who was richard nixon married to",
        "answer": ["Pat Nixon"],
        "q_entity": ["Richard Nixon"],
        "a_entity": ["Pat Nixon"],
        "choices": [],
        "graph": [
            ["Richard Nixon", "people.person.spouse_s", "m.01"],
            ["m.01", "people.marriage.spouse", "Pat Nixon"],
            ["m.01", "people.marriage.spouse", "Richard Nixon"],
            ["Richard Nixon", "people.person.nationality", "United States"],
            ["Pat Nixon", "people.person.nationality", "United States"],
            ["Richard Nixon", "people.person.profession", "Lawyer"],
            ["Richard Nixon", "people.person.place_of_birth", "Yorba Linda"],
            ["Yorba Linda", "location.location.containedby", "United States"],
            ["United States", "location.country.capital", "Washington"],
        ],
    },
    {
        "id": "q2",
        "question": "what country is yorba linda in",
        "answer": ["United States"],
        "q_entity": ["Yorba Linda"],
        "a_entity": ["United States"],
        "choices": [],
        "graph": [
            ["Yorba Linda", "location.location.containedby", "United States"],
            ["Yorba Linda", "location.location.containedby", "California"],
            ["California", "location.location.containedby", "United States"],
            ["Richard Nixon", "people.person.place_of_birth", "Yorba Linda"],
            ["Richard Nixon", "people.person.nationality", "United States"],
            ["United States", "location.country.capital", "Washington"],
        ],
    },
]


def tiny_dataset(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "test.jsonl", "w") as f:
        for row in ROWS:
            f.write(json.dumps(row) + "\n")
    return folder


def tiny_index(tmp_path: Path):
    from gsr_train.kg.index import get_index
    from gsr_train.text.embeddings import get_embeddings

    data = tiny_dataset(tmp_path / "data")
    index = get_index(str(data), splits=["test"], cache_dir=tmp_path / "cache")
    emb = get_embeddings(index, "hashing", tmp_path / "cache", splits=["test"])
    return index, emb
