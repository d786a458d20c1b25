"""Two hand-written WebQSP-style questions about the Obamas, in RoG row format, for the tests of the
cosine baseline and the embedding store (entity names with text next to nameless ``m.``/``g.`` nodes)."""

from __future__ import annotations

import json
from pathlib import Path

BORN = {
    "id": "q1",
    "question": "where was barack obama born",
    "answer": ["Honolulu"],
    "q_entity": ["Barack Obama"],
    "a_entity": ["Honolulu"],
    "graph": [
        ["Barack Obama", "people.person.place_of_birth", "Honolulu"],
        ["Barack Obama", "people.person.spouse_s", "m.02h98gq"],
        ["m.02h98gq", "people.marriage.spouse", "Michelle Obama"],
    ],
    "choices": [],
}
MARRIED = {
    "id": "q2",
    "question": "who is michelle obama married to",
    "answer": ["Barack Obama"],
    "q_entity": ["Michelle Obama"],
    "a_entity": ["Barack Obama"],
    "graph": [
        ["Michelle Obama", "people.person.spouse_s", "m.02h98gq"],
        ["m.02h98gq", "people.marriage.spouse", "Barack Obama"],
        ["g.11b6", "location.location.containedby", "Honolulu"],
    ],
    "choices": [],
}


def write_splits(folder: Path, splits: dict[str, list[dict]]) -> Path:
    """Writes each split's rows to ``folder/<split>.jsonl`` (the folder made here), written once for these tests."""
    folder.mkdir()
    for split, rows in splits.items():
        with open(folder / f"{split}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return folder
