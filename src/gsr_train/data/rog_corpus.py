"""Generated RoG-format corpora of any size, for measuring the data path at real scale.

The fixtures hold a few thousand questions; RoG-WebQSP has 20M triple rows and RoG-CWQ
80-150M. `write_corpus` writes a corpus shaped like them, in the hub layout the
loaders read (``data/{split}-00000-of-000NN.parquet``), streaming: one row group of
questions at a time is generated and written, so the generator's memory does not grow
with the corpus (the bench needs 100M rows on a 24 GiB machine).

What it imitates (the properties that cost memory and time in the real data):

* graph sizes log-normal around ``triples_per_question`` (4,300 for WebQSP), a few empty
  graphs and a few duplicate triples;
* 2-hop neighbourhoods of a topic entity whose neighbours are drawn Zipf-like (density
  ~ 1/rank) from one global entity pool, so graphs share entities the way Freebase hubs are
  shared and the distinct entity count grows sub-linearly with the corpus;
* Freebase-like names: multi-word names, and ``m.0...`` MIDs (no text) for a fixed
  share of the pool; ``domain.type.property`` relations, each graph using a few dozen;
* answers at one or two hops, some answers absent from the graph, some two-topic rows.

Everything is a pure function of ``(seed, split, question number)``: the same spec always
gives the same rows, whatever the shard size, and two machines get the same bytes.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gsr_train.io import atomic_dir, stable_hash, write_json

log = logging.getLogger(__name__)

GENERATOR_VERSION = 1
SPEC_FILE = "corpus.json"
SHAPES = {  # split sizes of the real datasets (questions)
    "webqsp": {"train": 2826, "validation": 246, "test": 1628},
    "cwq": {"train": 27639, "validation": 3519, "test": 3531},
}
ID_PREFIX = {"train": "GenTrn", "validation": "GenVal", "test": "GenTest"}
_SPLIT_CODE = {"train": 1, "validation": 2, "test": 3}

_WORDS = (
    "amber north river stone field grove harbor lake summit valley meadow cedar ridge bay "
    "crown forest glen hollow isle maple oak pine rose silver spring sun thorn vale willow "
    "ash birch brook cliff cove dale dune elm fern flint ford gate hill iron ivy kings lark "
    "marsh mill moor moss new old park port quarry rain red reed rock sand sea shadow shore "
    "sky snow star still storm swan tide tower wind winter wolf wood york zephyr alder arch "
    "bell black blue bright castle clear copper cross deep east fair fox gold green grey high "
    "hawk holly king lion long low maiden mist morning night ocean pearl queen raven royal "
    "saint scarlet south spire sweet thunder true violet west white wild young"
).split()
_DOMAINS = (
    "people film music location organization sports book tv education government business "
    "award military religion medicine architecture language travel food computer biology "
    "astronomy chemistry law time measurement media common base user freebase"
).split()
_PROPERTIES = (
    "name place of birth nationality spouse children parents sibling profession religion "
    "ethnicity gender date of birth date of death cause of death language country capital "
    "currency population area contains containedby time zone official language director "
    "producer actor character genre release date runtime award winner nominee team coach "
    "position league season school degree major employer title start end founded founder "
    "headquarters industry members album artist track composer lyricist author subject "
    "publisher edition series episode network program location event participant"
).split()
_ALPHABET = np.frombuffer(b"0123456789bcdfghjklmnpqrstvwxyz_", dtype=np.uint8)


@dataclass(frozen=True)
class CorpusSpec:
    """What to generate. ``questions`` maps split -> question count."""

    questions: dict[str, int] = field(default_factory=lambda: dict(SHAPES["webqsp"]))
    triples_per_question: int = 4300
    size_sigma: float = 0.8  # log-normal spread of graph sizes
    max_triples: int = 30_000  # cap on one graph (RoG graphs reach tens of thousands)
    entity_pool: int | None = None  # None: one tenth of the expected triple rows
    num_relations: int = 7000
    relations_per_graph: int = 72
    mid_share: float = 0.4  # share of pool entities that are nameless MIDs
    empty_graph_share: float = 0.003
    answer_absent_share: float = 0.05
    two_topic_share: float = 0.05
    duplicate_share: float = 0.002
    rows_per_group: int = 64  # parquet row group (questions)
    triples_per_shard: int = 8_000_000  # start a new shard file after this many rows
    seed: int = 0

    @classmethod
    def from_rows(cls, triple_rows: int, shape: str = "webqsp", **kwargs) -> CorpusSpec:
        """A corpus of about ``triple_rows`` triples with the split proportions of ``shape``."""
        if shape not in SHAPES:
            raise ValueError(f"shape must be one of {sorted(SHAPES)}, got {shape!r}")
        per_q = int(kwargs.get("triples_per_question", cls.triples_per_question))
        total_q = max(3, round(triple_rows / per_q))
        sizes = SHAPES[shape]
        scale = total_q / sum(sizes.values())
        questions = {s: max(1, round(n * scale)) for s, n in sizes.items()}
        return cls(questions=questions, **kwargs)

    @property
    def pool(self) -> int:
        if self.entity_pool:
            return int(self.entity_pool)
        expected = sum(self.questions.values()) * self.triples_per_question
        return max(1000, expected // 10)

    def key(self) -> str:
        return stable_hash("rog-corpus", GENERATOR_VERSION, asdict(self))


# ----------------------------------------------------------------------------- names


def _words(n: int, rng_seed: int) -> np.ndarray:
    """A fixed permutation of the word list (as an object array)."""
    words = np.array(_WORDS, dtype=object)
    return words[np.random.default_rng(rng_seed).permutation(len(words))][: max(n, 1)]


def _mid_names(ids: np.ndarray) -> pa.Array:
    """``m.0`` + base-32 digits of the id: unique per id, no text (like Freebase MIDs)."""
    width = 7
    digits = np.empty((ids.size, width), dtype=np.uint8)
    v = ids.astype(np.int64) * 2654435761 % (1 << 35)  # scramble, still a bijection on [0, 2^35)
    for k in range(width - 1, -1, -1):
        digits[:, k] = _ALPHABET[v & 31]
        v >>= 5
    raw = np.concatenate([np.full((ids.size, 3), np.frombuffer(b"m.0", np.uint8)), digits], axis=1)
    return pa.array(raw.view(f"S{width + 3}").ravel()).cast(pa.string())


class _Names:
    """Entity and relation names as pure functions of their ids (vectorised with Arrow)."""

    def __init__(self, spec: CorpusSpec) -> None:
        self.words = pa.array(list(_words(len(_WORDS), spec.seed + 17)))
        self.n_words = len(self.words)
        self.mid_share = spec.mid_share
        rels: list[str] = []
        rng = np.random.default_rng(spec.seed + 29)
        seen = set()
        while len(rels) < spec.num_relations:
            d = _DOMAINS[rng.integers(len(_DOMAINS))]
            t = "_".join(_PROPERTIES[i] for i in rng.integers(len(_PROPERTIES), size=rng.integers(1, 3)))
            p = "_".join(_PROPERTIES[i] for i in rng.integers(len(_PROPERTIES), size=rng.integers(1, 4)))
            name = f"{d}.{t}.{p}"
            if name not in seen:
                seen.add(name)
                rels.append(name)
        self.relations = pa.array(rels)
        self.relation_words = [r.replace(".", " ").replace("_", " ") for r in rels]

    def is_mid(self, ids: np.ndarray) -> np.ndarray:
        return self.is_mid_share(ids, self.mid_share)

    @staticmethod
    def is_mid_share(ids: np.ndarray, share: float) -> np.ndarray:
        mixed = np.asarray(ids, dtype=np.uint64) * np.uint64(11400714819323198485)  # wraps mod 2^64
        return (mixed >> np.uint64(54)) < np.uint64(int(share * 1024))

    def entities(self, ids: np.ndarray) -> pa.Array:
        """Names of ``ids`` (unique per id): three words + the id in base ``n_words`` for text
        entities, a MID for the rest."""
        ids = np.asarray(ids, dtype=np.uint64)
        mid = self.is_mid(ids)
        n = self.n_words
        a, b, c = ids % n, (ids // n) % n, (ids // (n * n)) % n
        rest = ids // (n * n * n)
        text = pc.binary_join_element_wise(
            self.words.take(pa.array(a.astype(np.int64))),
            self.words.take(pa.array(b.astype(np.int64))),
            self.words.take(pa.array(c.astype(np.int64))),
            " ",
        )
        title = pc.utf8_capitalize(text)
        if int(rest.max(initial=0)) > 0:  # pools beyond n^3 names: add a numeral
            suffix = pa.array(np.where(rest > 0, " " + rest.astype(str).astype(object), "").astype(object))
            title = pc.binary_join_element_wise(title, suffix, "")
        mids = _mid_names(ids.astype(np.int64))
        return pc.if_else(pa.array(mid), mids, title)


# ----------------------------------------------------------------------------- rows


def _zipf(rng: np.random.Generator, pool: int, size: int) -> np.ndarray:
    """Ids in ``[0, pool)`` with probability ~ 1 / (rank + 1) (bounded log-uniform)."""
    u = rng.random(size)
    rank = np.floor(np.exp(u * math.log(pool + 1))).astype(np.int64) - 1
    # scatter popular ranks over the id space (a fixed bijection: odd multiplier mod 2^k)
    return (rank * 0x9E3779B1 + 7) % pool if pool > 1 else rank * 0


def _question_rng(spec: CorpusSpec, split: str, q: int) -> np.random.Generator:
    return np.random.default_rng([spec.seed, _SPLIT_CODE.get(split, 9), q])


def _graph(spec: CorpusSpec, rng: np.random.Generator) -> dict:
    """One question's ids: topic(s), triples (h, r, t), answers, and whether answers are absent."""
    pool = spec.pool
    if rng.random() < spec.empty_graph_share:
        n = 0
    else:
        mu = math.log(spec.triples_per_question) - spec.size_sigma**2 / 2
        n = int(min(spec.max_triples, max(1, round(rng.lognormal(mu, spec.size_sigma)))))

    def named(size: int) -> np.ndarray:  # topic entities have names, as in RoG
        cand = _zipf(rng, pool, 16 * size)
        cand = cand[~_Names.is_mid_share(cand, spec.mid_share)]
        return cand[:size] if cand.size >= size else _zipf(rng, pool, size)

    topics = np.unique(named(2 if rng.random() < spec.two_topic_share else 1))
    n1 = max(1, n // 4) if n else 0
    k1 = max(1, n1 // 2)
    hop1 = _zipf(rng, pool, k1)
    rels = np.unique(_zipf(rng, spec.num_relations, spec.relations_per_graph))
    h = np.empty(n, dtype=np.int64)
    t = np.empty(n, dtype=np.int64)
    if n:
        near = hop1[rng.integers(k1, size=n1)]
        topic = topics[rng.integers(topics.size, size=n1)]
        flip = rng.random(n1) < 0.3
        h[:n1] = np.where(flip, near, topic)
        t[:n1] = np.where(flip, topic, near)
        n2 = n - n1
        mid = hop1[rng.integers(k1, size=n2)]
        far = _zipf(rng, pool, n2)
        flip = rng.random(n2) < 0.3
        h[n1:] = np.where(flip, far, mid)
        t[n1:] = np.where(flip, mid, far)
        order = rng.permutation(n)  # RoG graphs come shuffled
        h, t = h[order], t[order]
    r = rels[rng.integers(rels.size, size=n)] if n else np.zeros(0, np.int64)
    dups = int(n * spec.duplicate_share)
    if dups:
        src, dst = rng.integers(n, size=dups), rng.integers(n, size=dups)
        h[dst], r[dst], t[dst] = h[src], r[src], t[src]
    absent = n == 0 or rng.random() < spec.answer_absent_share
    if absent:
        answers = _zipf(rng, pool, 1) + pool  # beyond the pool: never in any graph
    else:
        cand = np.concatenate([hop1, t[n1:][:50]])
        answers = np.unique(cand[rng.integers(cand.size, size=int(rng.integers(1, 4)))])
        not_topic = answers[~np.isin(answers, topics)]
        answers = not_topic if not_topic.size else answers
    return {
        "topics": topics,
        "h": h,
        "r": r,
        "t": t,
        "answers": answers,
        "rel_for_text": int(rels[rng.integers(rels.size)]),
        "absent": absent,
    }


def _list(offsets: list[int] | np.ndarray, values: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.asarray(offsets, dtype=np.int32)), values)


def row_group(spec: CorpusSpec, names: _Names, split: str, start: int, stop: int) -> pa.Table:
    """Questions ``start:stop`` of ``split`` as one Arrow table in the RoG schema."""
    graphs = [_graph(spec, _question_rng(spec, split, q)) for q in range(start, stop)]
    ids = np.unique(np.concatenate([np.concatenate([g["topics"], g["h"], g["t"], g["answers"]]) for g in graphs]))
    ent_names = names.entities(ids)

    def ent(x: np.ndarray) -> np.ndarray:
        return np.searchsorted(ids, x)

    num_ent = len(ids)
    flat = [np.stack([ent(g["h"]), g["r"] + num_ent, ent(g["t"])], axis=1).ravel() for g in graphs]
    row_off = np.concatenate([[0], np.cumsum([g["h"].size for g in graphs])])
    table = pa.concat_arrays([ent_names, names.relations])
    values = table.take(pa.array(np.concatenate(flat).astype(np.int64)))
    graph = _list(row_off, _list(np.arange(0, 3 * int(row_off[-1]) + 1, 3), values))

    def string_lists(per_row: list[np.ndarray]) -> pa.Array:
        off = np.concatenate([[0], np.cumsum([x.size for x in per_row])])
        return _list(off, ent_names.take(pa.array(np.concatenate(per_row).astype(np.int64))))

    topics = [ent(g["topics"]) for g in graphs]
    answers = [ent(g["answers"]) for g in graphs]
    topic_names = ent_names.take(pa.array(np.array([t[0] for t in topics], dtype=np.int64)))
    rel_words = [names.relation_words[g["rel_for_text"]] for g in graphs]
    questions = [f"what {w} does {n} have" for w, n in zip(rel_words, topic_names.to_pylist())]
    a_entity = string_lists([a if not g["absent"] or g["h"].size == 0 else a[:0] for a, g in zip(answers, graphs)])
    return pa.table(
        {
            "id": pa.array([f"{ID_PREFIX.get(split, split)}-{q}" for q in range(start, stop)]),
            "question": pa.array(questions),
            "answer": string_lists(answers),
            "q_entity": string_lists(topics),
            "a_entity": a_entity,
            "graph": graph,
            "choices": _list(np.zeros(stop - start + 1, np.int32), pa.array([], pa.string())),
        }
    )


def iter_row_groups(spec: CorpusSpec, split: str) -> Iterator[pa.Table]:
    names = _Names(spec)
    n = int(spec.questions.get(split, 0))
    for start in range(0, n, spec.rows_per_group):
        yield row_group(spec, names, split, start, min(n, start + spec.rows_per_group))


# ----------------------------------------------------------------------------- files


def _write_split(spec: CorpusSpec, split: str, folder: Path) -> dict:
    """Shards ``{split}-XXXXX-of-YYYYY.parquet`` (renamed once the shard count is known)."""
    shards: list[Path] = []
    writer: pq.ParquetWriter | None = None
    rows_in_shard, triples, questions = 0, 0, 0
    for table in iter_row_groups(spec, split):
        if writer is None or rows_in_shard >= spec.triples_per_shard:
            if writer is not None:
                writer.close()
            shards.append(folder / f"{split}-{len(shards):05d}.parquet.part")
            writer = pq.ParquetWriter(shards[-1], table.schema)
            rows_in_shard = 0
        writer.write_table(table, row_group_size=table.num_rows)
        n = int(pc.sum(pc.list_value_length(table["graph"])).as_py() or 0)
        rows_in_shard += n
        triples += n
        questions += table.num_rows
    if writer is not None:
        writer.close()
    for k, part in enumerate(shards):
        part.rename(folder / f"{split}-{k:05d}-of-{len(shards):05d}.parquet")
    return {"questions": questions, "triples": triples, "shards": len(shards)}


def write_corpus(spec: CorpusSpec, folder: str | Path) -> dict:
    """Write the corpus into ``folder/data/`` (atomically: a finished folder or nothing).

    A folder that already holds this spec's corpus is kept as it is. Returns the summary
    written to ``folder/corpus.json`` (questions, triple rows and shards per split).
    """
    folder = Path(folder)
    done = read_spec(folder)
    if done is not None and done.get("key") == spec.key():
        return done
    with atomic_dir(folder) as tmp:
        (tmp / "data").mkdir()
        splits = {s: _write_split(spec, s, tmp / "data") for s in spec.questions}
        summary = {
            "key": spec.key(),
            "spec": asdict(spec),
            "splits": splits,
            "triples": sum(s["triples"] for s in splits.values()),
            "questions": sum(s["questions"] for s in splits.values()),
        }
        write_json(tmp / SPEC_FILE, summary)
    log.info("generated %d questions, %d triple rows in %s", summary["questions"], summary["triples"], folder)
    return summary


def read_spec(folder: str | Path) -> dict | None:
    path = Path(folder) / SPEC_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
