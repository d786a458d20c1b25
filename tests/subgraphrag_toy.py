"""A tiny learnable KGQA dataset in RoG row format, for SubgraphRAG tests (seconds, hashing encoder).

Every question asks for one relation of its topic entity ("who directed Topic 7"); the
graph holds the topic's edges for every relation (1 hop), edges from those entities on
(2 hops, some through nameless ``m.`` mediator nodes) and edges between other entities.
The positive triple is (topic, asked relation, answer): learnable from the question text
and the DDE, impossible to rank first by chance.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

RELATIONS = {
    "film.film.directed_by": "who directed {}",
    "people.person.nationality": "what is the nationality of {}",
    "people.person.place_of_birth": "where was {} born",
    "music.artist.genre": "what genre does {} play",
    "sports.team.sport": "what sport does {} play",
    "location.location.containedby": "what country contains {}",
    "people.person.spouse_s": "who is the spouse of {}",
    "education.education.institution": "where did {} study",
}
OTHER = ["common.topic.notable_types", "base.misc.related_to", "location.location.nearby"]


def toy_rows(n: int, seed: int, prefix: str) -> list[dict]:
    rng = random.Random(seed)
    rels = list(RELATIONS)
    rows = []
    for i in range(n):
        topic = f"Topic {prefix}{i}"
        asked = rels[rng.randrange(len(rels))]
        graph, answer = [], None
        for r in rels:
            tail = f"Thing {prefix}{i} {r.split('.')[-1]}"
            graph.append([topic, r, tail])
            if r == asked:
                answer = tail
            for j in range(2):
                mid = f"m.0{prefix.lower()}{i}x{rels.index(r)}y{j}"
                graph.append([tail, OTHER[j % len(OTHER)], mid])
                graph.append([mid, rels[rng.randrange(len(rels))], f"Far {prefix}{i} {rng.randrange(50)}"])
        for j in range(6):
            graph.append([f"Other {prefix}{i} {j}", rels[rng.randrange(len(rels))], f"Far {prefix}{i} {j + 50}"])
        rng.shuffle(graph)
        rows.append(
            {
                "id": f"{prefix}-{i}",
                "question": RELATIONS[asked].format(topic),
                "answer": [answer],
                "q_entity": [topic],
                "a_entity": [answer],
                "graph": graph,
                "choices": [],
            }
        )
    return rows


def write_toy(folder: str | Path, sizes=(48, 16, 16), seed: int = 0) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n, prefix in zip(("train", "validation", "test"), sizes, ("T", "V", "E")):
        with gzip.open(folder / f"{split}.jsonl.gz", "wt", encoding="utf-8") as f:
            for row in toy_rows(n, seed * 1000 + ord(prefix), prefix):
                f.write(json.dumps(row) + "\n")
    return folder


def toy_quickstart_args(data: str | Path, epochs: int = 2, graphs_per_batch: int = 4) -> list[str]:
    """The overrides of ``+experiment=subgraphrag_quickstart`` on toy data in ``data`` (hashing encoder, a tiny
    scorer), written once for the tests that start ``train.py`` themselves."""
    return [
        "+experiment=subgraphrag_quickstart",
        f"data.dir={data}",
        "data.name=toy",
        "encoder.name=hashing",
        "+encoder.dim=32",
        "model.hidden=32",
        f"model.train.epochs={epochs}",
        f"model.train.graphs_per_batch={graphs_per_batch}",
    ]


def toy_run_overrides(root: Path, sizes=(24, 8, 8), settings: dict | None = None) -> list[str]:
    """Overrides that run ``+experiment=subgraphrag_quickstart`` on toy data written under ``root``
    (hashing encoder, a tiny scorer, no progress bar, caches and run folder inside ``root``)."""
    values = {
        "+experiment": "subgraphrag_quickstart",
        "data.dir": write_toy(root / "data", sizes=sizes),
        "data.name": "toy",
        "encoder.name": "hashing",
        "+encoder.dim": 32,
        "model.hidden": 32,
        "model.train.epochs": 2,
        "model.train.graphs_per_batch": 4,
        "logger": "none",
        "trainer.enable_progress_bar": "false",
        "paths.cache_dir": root / "cache",
        "paths.output_dir": root / "run",
        "experiment_name": "toy",
        **(settings or {}),
    }
    return [f"{key}={value}" for key, value in values.items()] + ["~callbacks.rich_progress"]
