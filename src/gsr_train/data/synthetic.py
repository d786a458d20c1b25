"""The embedded benchmark: a deterministic, Freebase-like KGQA dataset generated on demand.

It exists so that every stage (index, embeddings, supervision, training, evaluation) can
run end to end offline in a couple of minutes, on data that is hard in the same ways as
WebQSP: answers two hops away through nameless mediator nodes, hub entities that offer
shortcut paths which are not the answer path, many triples with the answer's relation
about other entities, two-topic questions and answers missing from the graph.

``generate(config)`` returns RoG-format rows per split; ``write_synthetic`` writes them as
``{train,validation,test}.jsonl.gz`` (byte-identical for the same config) plus
``question_meta.jsonl.gz`` (family, hops and gold relation chains per question) and
``meta.json``; ``ensure_synthetic`` keeps one generated copy per config in a cache folder.
The world is built in `synthetic_world`, the questions in `synthetic_questions`;
this module cuts each question's graph out of the world and writes the files.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gsr_train.config import default_cache_dir
from gsr_train.data.synthetic_config import GENERATOR_VERSION, SPLITS, SyntheticConfig  # noqa: F401
from gsr_train.data.synthetic_questions import Question, sample_questions
from gsr_train.data.synthetic_schema import HUB_TYPES
from gsr_train.data.synthetic_world import World, build_world
from gsr_train.io import atomic_dir, file_digest, write_json

log = logging.getLogger(__name__)

ID_PREFIX = {"train": "SynTrn", "validation": "SynVal", "test": "SynTest"}
META_FILE = "meta.json"
QUESTION_META_FILE = "question_meta.jsonl.gz"


# ---------------------------------------------------------------------------- graphs
class Subgrapher:
    """Cuts the 2-hop neighbourhood of topic entities out of the world's triple arrays.

    Edges count as undirected for the neighbourhood; triples keep their direction. All
    triples touching a topic are kept, and so are all triples of ordinary 1-hop
    neighbours. A hub neighbour (an entity of a hub type: ``Male``, ``Actor``, ``United
    States of America``, ``English Language``) keeps its edges to entities next to the topic or behind one of its
    mediator
    nodes (these make the hub shortcuts: topic -> Male <- spouse) plus ``hub_fanout``
    others, preferring those that close a path to an entity already in the graph. If the
    result exceeds ``max_triples``, 2-hop triples are cut round-robin over neighbours, so
    small neighbours (a mediator, a parent) keep their few triples while hubs and busy
    neighbours give up the most.
    """

    def __init__(self, world: World, max_triples: int, hub_fanout: int) -> None:
        self.h, self.t = world.heads, world.tails
        self.max_triples, self.fanout = max_triples, hub_fanout
        n = len(world.names)
        nodes = np.concatenate([self.h, self.t])
        tids = np.concatenate([np.arange(len(self.h))] * 2)
        order = np.argsort(nodes, kind="stable")
        self.inc = tids[order]
        self.ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(nodes, minlength=n), out=self.ptr[1:])
        self.degree = world.degree
        self.mediator = np.array([t.startswith("cvt:") for t in world.types], dtype=bool)
        self.hub = np.array([t in HUB_TYPES for t in world.types], dtype=bool)

    def incident(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Triple ids touching ``nodes`` and, for each, the node it was reached from."""
        starts, lens = self.ptr[nodes], self.ptr[nodes + 1] - self.ptr[nodes]
        total = int(lens.sum())
        within = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
        return self.inc[np.repeat(starts, lens) + within], np.repeat(nodes, lens)

    def __call__(self, topics: list[int], rng: np.random.Generator) -> np.ndarray:
        topics_a = np.array(sorted(set(topics)), dtype=np.int64)
        one_hop = np.unique(self.incident(topics_a)[0])
        neighbours = np.setdiff1d(np.concatenate([self.h[one_hop], self.t[one_hop]]), topics_a)
        cand, owner = self.incident(neighbours)
        keep = ~np.isin(cand, one_hop)
        cand, owner = cand[keep], owner[keep]
        _, first = np.unique(cand, return_index=True)
        first.sort()
        cand, owner = cand[first], owner[first]
        far = np.where(self.h[cand] == owner, self.t[cand], self.h[cand])
        hub = self.hub[owner]
        near = np.union1d(np.union1d(topics_a, neighbours), far[self.mediator[owner]])
        local = np.union1d(near, far[~hub])
        # tier 0: always kept; 1: hub edge closing a path; 2: other hub edge
        tier = np.where(~hub | np.isin(far, near), 0, np.where(np.isin(far, local), 1, 2))
        u = rng.random(len(cand))
        extra = tier > 0
        order = np.lexsort((u, tier, owner))
        group = owner[order] * 2 + extra[order]
        starts = np.r_[0, np.flatnonzero(group[1:] != group[:-1]) + 1]
        rank = np.empty(len(cand), dtype=np.int64)
        rank[order] = np.arange(len(cand)) - np.repeat(starts, np.diff(np.r_[starts, len(cand)]))
        chosen = np.flatnonzero(~extra | (rank < self.fanout))
        budget = max(self.max_triples - len(one_hop), 0)
        if len(chosen) > budget:
            priority = np.lexsort((u[chosen], rank[chosen], extra[chosen]))
            chosen = chosen[priority[:budget]]
        triples = np.concatenate([one_hop, cand[chosen]])
        return triples[rng.permutation(len(triples))]


# ---------------------------------------------------------------------------- build
@dataclass
class SyntheticBuild:
    """Everything one generation produced: rows and per-question facts per split."""

    config: SyntheticConfig
    rows: dict[str, list[dict]]
    meta: dict[str, list[dict]]
    world_stats: dict[str, Any]


def _missing_choice(questions: list[Question], world: World, n: int, rng) -> dict[int, list[int]]:
    """Pick ``n`` questions whose answers (some or all) will be absent from the graph.

    Only questions whose answers are ordinary entities qualify: deleting a hub such as
    ``Male`` would gut the graph instead of simulating one missing fact.
    """
    eligible = [
        i
        for i, q in enumerate(questions)
        if all(world.types[a] not in HUB_TYPES and not world.is_mediator(a) for a in q.answers)
    ]
    picked = rng.choice(len(eligible), min(n, len(eligible)), replace=False) if eligible else []
    out = {}
    for k in sorted(int(x) for x in picked):
        q = questions[eligible[k]]
        if len(q.answers) == 1 or rng.random() < 0.5:
            out[eligible[k]] = list(q.answers)
        else:
            size = int(rng.integers(1, len(q.answers)))
            out[eligible[k]] = sorted(int(a) for a in rng.choice(q.answers, size, replace=False))
    return out


def build(config: SyntheticConfig | dict | None = None) -> SyntheticBuild:
    """Generate the world, the questions and every question's graph."""
    cfg = SyntheticConfig.from_any(config)
    world = build_world(cfg)
    questions = sample_questions(world, cfg)
    rng = np.random.default_rng([cfg.seed, 3])
    order = rng.permutation(len(questions))
    sizes = {"train": cfg.num_train, "validation": cfg.num_validation, "test": cfg.num_test}
    subgraph = Subgrapher(world, cfg.max_triples, cfg.hub_fanout)
    names = np.array(world.names, dtype=object)
    rel_names = np.array(world.relations, dtype=object)
    rows: dict[str, list[dict]] = {}
    meta: dict[str, list[dict]] = {}
    start = 0
    for split_no, split in enumerate(SPLITS):
        qs = [questions[i] for i in order[start : start + sizes[split]]]
        start += sizes[split]
        missing = _missing_choice(
            qs, world, int(round(len(qs) * cfg.missing_answer_fraction)), np.random.default_rng([cfg.seed, 4, split_no])
        )
        rows[split], meta[split] = [], []
        for k, q in enumerate(qs):
            qid = f"{ID_PREFIX[split]}-{k}"
            tids = subgraph(q.topics, np.random.default_rng([cfg.seed, 5, split_no, k]))
            gone = missing.get(k, [])
            if gone:
                gone_a = np.array(gone)
                tids = tids[~(np.isin(world.heads[tids], gone_a) | np.isin(world.tails[tids], gone_a))]
            heads, rels, tails = names[world.heads[tids]], rel_names[world.rels[tids]], names[world.tails[tids]]
            graph = [[a, r, b] for a, r, b in zip(heads.tolist(), rels.tolist(), tails.tolist())]
            in_graph = set(np.union1d(world.heads[tids], world.tails[tids]).tolist())
            answers = sorted(world.names[a] for a in q.answers)
            a_entity = sorted(world.names[a] for a in q.answers if a in in_graph)
            rows[split].append(
                {
                    "id": qid,
                    "question": q.text,
                    "answer": answers,
                    "q_entity": [world.names[t] for t in q.topics],
                    "a_entity": a_entity,
                    "graph": graph,
                    "choices": [],
                }
            )
            meta[split].append(
                {
                    "id": qid,
                    "family": q.family,
                    "hops": q.hops,
                    "chains": [{"topic": world.names[t], "relations": c} for t, c in zip(q.topics, q.chains)],
                    "missing_answers": sorted(world.names[a] for a in gone),
                }
            )
    types = np.array(world.types, dtype=object)
    world_stats = {
        "entities": len(world.names),
        "named_entities": int(sum(1 for t in world.types if not t.startswith("cvt:"))),
        "mediators": int(sum(1 for t in world.types if t.startswith("cvt:"))),
        "relations": len(world.relations),
        "triples": world.num_triples,
        "max_degree": {world.names[i]: int(world.degree[i]) for i in np.argsort(-world.degree, kind="stable")[:5]},
        "types": {t: int((types == t).sum()) for t in sorted(set(world.types))},
    }
    return SyntheticBuild(cfg, rows, meta, world_stats)


def generate(config: SyntheticConfig | dict | None = None) -> dict[str, list[dict]]:
    """RoG-format rows of the synthetic benchmark, per split (train / validation / test)."""
    return build(config).rows


# ---------------------------------------------------------------------------- files
def _write_jsonl_gz(path: Path, rows: list[dict]) -> None:
    """Gzip with mtime 0 and no file name in the header, so the bytes depend on rows only."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
        for row in rows:
            gz.write(json.dumps(row, ensure_ascii=False).encode("utf-8"))
            gz.write(b"\n")


def summarize(result: SyntheticBuild) -> dict[str, Any]:
    """Figures that describe a generated benchmark (printed by data_prep/make_synthetic.py)."""
    splits = {}
    entities: set[str] = set()
    relations: set[str] = set()
    for split in SPLITS:
        rows, meta = result.rows[split], result.meta[split]
        sizes = [len(r["graph"]) for r in rows]
        for r in rows:
            for h, rel, t in r["graph"]:
                entities.add(h)
                entities.add(t)
                relations.add(rel)
        n = max(len(rows), 1)
        hops: dict[str, int] = {}
        for m in meta:
            hops[str(m["hops"])] = hops.get(str(m["hops"]), 0) + 1
        splits[split] = {
            "questions": len(rows),
            "hops": dict(sorted(hops.items())),
            "two_topic_share": sum(len(r["q_entity"]) > 1 for r in rows) / n,
            "missing_answer_share": sum(len(r["a_entity"]) < len(r["answer"]) for r in rows) / n,
            "no_answer_in_graph_share": sum(not r["a_entity"] for r in rows) / n,
            "triples_mean": statistics.fmean(sizes) if sizes else 0.0,
            "triples_median": statistics.median(sizes) if sizes else 0.0,
            "triples_max": max(sizes, default=0),
            "families": len({m["family"] for m in meta}),
        }
    return {
        "splits": splits,
        "distinct_entities_in_graphs": len(entities),
        "distinct_named_entities_in_graphs": sum(1 for e in entities if not (e.startswith("m.") or e.startswith("g."))),
        "distinct_relations_in_graphs": len(relations),
        "world": result.world_stats,
    }


def write_build(folder: str | Path, result: SyntheticBuild) -> Path:
    """Write a generated benchmark into ``folder`` (swapped in atomically as a whole)."""
    folder = Path(folder)
    with atomic_dir(folder) as tmp:
        files: dict[str, dict[str, Any] | None] = {}  # name -> size and digest, filled in once all are written
        for split in SPLITS:
            _write_jsonl_gz(tmp / f"{split}.jsonl.gz", result.rows[split])
            files[f"{split}.jsonl.gz"] = None
        _write_jsonl_gz(tmp / QUESTION_META_FILE, [dict(m, split=s) for s in SPLITS for m in result.meta[s]])
        files[QUESTION_META_FILE] = None
        for name in files:
            files[name] = {"bytes": (tmp / name).stat().st_size, "sha256": file_digest(tmp / name)}
        write_json(
            tmp / META_FILE,
            {
                "generator_version": GENERATOR_VERSION,
                "config": dataclasses.asdict(result.config),
                "files": files,
                "summary": summarize(result),
            },
        )
    return folder


def write_synthetic(folder: str | Path, config: SyntheticConfig | dict | None = None) -> Path:
    """Generate the benchmark for ``config`` and write it into ``folder``."""
    return write_build(folder, build(config))


def load_question_meta(folder: str | Path) -> dict[str, dict]:
    """Per-question facts of a written benchmark, by question id: split, family, hops,
    gold relation chains per topic entity (``~rel`` = walked tail -> head) and the answers
    deliberately left out of the graph."""
    path = Path(folder) / QUESTION_META_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no question meta (is {folder} a synthetic benchmark folder?)")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return {m["id"]: m for m in map(json.loads, f)}


def is_complete(folder: str | Path, verify: bool = True) -> bool:
    """True when ``folder`` holds every file its meta.json lists, with matching size/hash."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / META_FILE).read_text())
        files = meta["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if meta.get("generator_version") != GENERATOR_VERSION:
        return False
    for split in SPLITS:
        if f"{split}.jsonl.gz" not in files:
            return False
    for name, info in files.items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != info.get("bytes"):
            return False
        if verify and file_digest(path) != info.get("sha256"):
            return False
    return True


def ensure_synthetic(config: SyntheticConfig | dict | None = None, cache_dir: str | Path | None = None) -> Path:
    """The cached folder of the benchmark for ``config``, generated on first use.

    The folder is ``cache_dir/synthetic/<hash of config and generator version>``; it is
    regenerated when a file is missing or damaged.
    """
    cfg = SyntheticConfig.from_any(config)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = cache_dir / "synthetic" / cfg.key()
    if is_complete(folder):
        return folder
    if folder.exists():
        log.warning("synthetic benchmark at %s is incomplete or damaged; regenerating", folder)
    log.info("generating the synthetic benchmark into %s", folder)
    return write_synthetic(folder, cfg)
