"""The KG index: one global entity / relation vocabulary and compact per-question graphs.

Raw rows carry string triples; every later stage wants integers. ``build_index`` turns all
splits of a dataset into

* ``entities`` / ``relations``: the global vocabularies (shared across splits, so a model
  trained on one split can score another);
* per split, a :class:`SplitGraphs`: the local graphs of all questions concatenated in CSR
  form (``ent_ptr`` / ``edge_ptr`` offsets), with local ``edge_index``, global relation ids,
  and topic / answer masks over the local entities.

The result is cached on disk under a key made from the input files' contents and the
options, written atomically, and verified (sizes + SHA-256) when it is loaded, so a
stale or truncated cache is rebuilt instead of trusted.
"""
from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from gsr_train.data.rows import Row, SkipReport, find_split_file, load_rows
from gsr_train.io import atomic_dir, file_digest, stable_hash, write_json

log = logging.getLogger(__name__)

INDEX_FORMAT = 1
NO_TEXT_PATTERN = re.compile(r"^[mg]\.[0-9a-z_]+$")


def has_text(name: str) -> bool:
    """Raw Freebase ids (``m.0abc``, ``g.11x``) carry no useful text."""
    return NO_TEXT_PATTERN.match(name) is None


@dataclass
class QuestionGraph:
    """One question's local graph (a view into :class:`SplitGraphs`)."""

    id: str
    question: str
    answers: list[str]
    entity_ids: torch.Tensor  # [N] global entity id of each local entity
    edge_index: torch.Tensor  # [2, E] local head / tail
    edge_rel: torch.Tensor  # [E] global relation id
    topic_mask: torch.Tensor  # [N] bool
    answer_mask: torch.Tensor  # [N] bool

    @property
    def num_entities(self) -> int:
        return int(self.entity_ids.numel())

    @property
    def num_edges(self) -> int:
        return int(self.edge_rel.numel())


@dataclass
class SplitGraphs:
    """All local graphs of one split, concatenated (CSR offsets per question)."""

    ids: list[str]
    questions: list[str]
    answers: list[list[str]]
    ent_ptr: torch.Tensor  # [Q+1]
    entity_ids: torch.Tensor  # [sum N]
    topic_mask: torch.Tensor  # [sum N] bool
    answer_mask: torch.Tensor  # [sum N] bool
    edge_ptr: torch.Tensor  # [Q+1]
    edge_index: torch.Tensor  # [2, sum E], local ids
    edge_rel: torch.Tensor  # [sum E]

    def __len__(self) -> int:
        return len(self.ids)

    def _offsets(self) -> tuple[list[int], list[int]]:
        """``ent_ptr`` / ``edge_ptr`` as Python lists (kept while the tensors stay the same):
        reading tensor elements one by one costs microseconds each on the serving path."""
        cached = self.__dict__.get("_offsets_cache")
        if cached is None or cached[0] is not self.ent_ptr or cached[1] is not self.edge_ptr:
            cached = (self.ent_ptr, self.edge_ptr, self.ent_ptr.tolist(), self.edge_ptr.tolist())
            self.__dict__["_offsets_cache"] = cached
        return cached[2], cached[3]

    def graph(self, i: int) -> QuestionGraph:
        ent_ptr, edge_ptr = self._offsets()
        if not -len(self) <= i < len(self):
            raise IndexError(f"question {i} out of range for a split of {len(self)} questions")
        i = i % len(self)
        n0, n1 = ent_ptr[i], ent_ptr[i + 1]
        e0, e1 = edge_ptr[i], edge_ptr[i + 1]
        return QuestionGraph(
            id=self.ids[i],
            question=self.questions[i],
            answers=self.answers[i],
            entity_ids=self.entity_ids[n0:n1],
            edge_index=self.edge_index[:, e0:e1],
            edge_rel=self.edge_rel[e0:e1],
            topic_mask=self.topic_mask[n0:n1],
            answer_mask=self.answer_mask[n0:n1],
        )

    def __iter__(self):
        return (self.graph(i) for i in range(len(self)))

    @property
    def num_edges(self) -> torch.Tensor:
        return self.edge_ptr[1:] - self.edge_ptr[:-1]

    @property
    def num_entities(self) -> torch.Tensor:
        return self.ent_ptr[1:] - self.ent_ptr[:-1]

    def position(self) -> dict[str, int]:
        return {qid: i for i, qid in enumerate(self.ids)}

    def edge_question(self) -> torch.Tensor:
        """Question index of every edge (``[sum E]``)."""
        return torch.repeat_interleave(torch.arange(len(self)), self.num_edges)

    def global_edges(self) -> torch.Tensor:
        """``[sum E, 3]`` global (head, relation, tail) ids of every edge."""
        offsets = torch.repeat_interleave(self.ent_ptr[:-1], self.num_edges)
        heads = self.entity_ids[self.edge_index[0] + offsets]
        tails = self.entity_ids[self.edge_index[1] + offsets]
        return torch.stack([heads, self.edge_rel, tails], dim=1)

    def subset(self, indices: Sequence[int]) -> "SplitGraphs":
        """A new SplitGraphs with only the given questions (in that order)."""
        parts = [self.graph(i) for i in indices]
        return _concat(parts)

    def to_state(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _concat(parts: list[QuestionGraph]) -> SplitGraphs:
    n = torch.tensor([0] + [p.num_entities for p in parts]).cumsum(0)
    e = torch.tensor([0] + [p.num_edges for p in parts]).cumsum(0)

    def cat(tensors, dtype, dim=0, empty_shape=(0,)):
        return torch.cat(tensors, dim=dim) if tensors else torch.zeros(empty_shape, dtype=dtype)

    return SplitGraphs(
        ids=[p.id for p in parts],
        questions=[p.question for p in parts],
        answers=[list(p.answers) for p in parts],
        ent_ptr=n,
        entity_ids=cat([p.entity_ids for p in parts], torch.long),
        topic_mask=cat([p.topic_mask for p in parts], torch.bool),
        answer_mask=cat([p.answer_mask for p in parts], torch.bool),
        edge_ptr=e,
        edge_index=cat([p.edge_index for p in parts], torch.long, dim=1, empty_shape=(2, 0)),
        edge_rel=cat([p.edge_rel for p in parts], torch.long),
    )


@dataclass
class KGIndex:
    """Global vocabularies plus the local graphs of every split."""

    entities: list[str]
    relations: list[str]
    splits: dict[str, SplitGraphs]
    skips: dict[str, dict]
    key: str = ""

    def __getitem__(self, split: str) -> SplitGraphs:
        if split not in self.splits:
            raise KeyError(f"split {split!r} not in the index (have {sorted(self.splits)})")
        return self.splits[split]

    def entity_has_text(self) -> torch.Tensor:
        return torch.tensor([has_text(e) for e in self.entities], dtype=torch.bool)

    def entity_lookup(self) -> dict[str, int]:
        return {e: i for i, e in enumerate(self.entities)}

    def relation_lookup(self) -> dict[str, int]:
        return {r: i for i, r in enumerate(self.relations)}

    def triple_strings(self, split: str, i: int) -> list[list[str]]:
        g = self[split].graph(i)
        heads = g.entity_ids[g.edge_index[0]].tolist()
        tails = g.entity_ids[g.edge_index[1]].tolist()
        return [
            [self.entities[h], self.relations[r], self.entities[t]]
            for h, r, t in zip(heads, g.edge_rel.tolist(), tails)
        ]


class _Vocab:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, name: str) -> int:
        idx = self.ids.get(name)
        if idx is None:
            idx = self.ids[name] = len(self.ids)
        return idx

    def names(self) -> list[str]:
        return list(self.ids)


def _encode_split(rows: Iterable[Row], ents: _Vocab, rels: _Vocab) -> tuple[SplitGraphs, int]:
    """Intern strings and build local graphs; returns the split and the duplicate count."""
    ids, questions, answers = [], [], []
    ent_chunks, topic_chunks, answer_chunks, edge_chunks, rel_chunks = [], [], [], [], []
    ent_sizes, edge_sizes = [0], [0]
    duplicates = 0
    for row in rows:
        ids.append(row.id)
        questions.append(row.question)
        answers.append(list(row.answer))
        unique_triples = list(dict.fromkeys(row.graph))
        duplicates += len(row.graph) - len(unique_triples)
        h = np.fromiter((ents(t[0]) for t in unique_triples), dtype=np.int64, count=len(unique_triples))
        r = np.fromiter((rels(t[1]) for t in unique_triples), dtype=np.int64, count=len(unique_triples))
        t = np.fromiter((ents(t[2]) for t in unique_triples), dtype=np.int64, count=len(unique_triples))
        topics = np.array([ents(e) for e in row.q_entity], dtype=np.int64)
        golds = np.array([ents(e) for e in row.a_entity], dtype=np.int64)
        nodes, inverse = np.unique(np.concatenate([topics, golds, h, t]), return_inverse=True)
        nt, na, ne = len(topics), len(golds), len(h)
        local = inverse[nt + na :]
        ent_chunks.append(nodes)
        topic_chunks.append(np.isin(nodes, topics))
        answer_chunks.append(np.isin(nodes, golds))
        edge_chunks.append(np.stack([local[:ne], local[ne:]]))
        rel_chunks.append(r)
        ent_sizes.append(len(nodes))
        edge_sizes.append(ne)

    def cat(chunks, dtype, axis=0, empty=(0,)):
        if not chunks:
            return torch.zeros(empty, dtype=dtype)
        return torch.from_numpy(np.concatenate(chunks, axis=axis)).to(dtype)

    split = SplitGraphs(
        ids=ids,
        questions=questions,
        answers=answers,
        ent_ptr=torch.tensor(ent_sizes, dtype=torch.long).cumsum(0),
        entity_ids=cat(ent_chunks, torch.long),
        topic_mask=cat(topic_chunks, torch.bool),
        answer_mask=cat(answer_chunks, torch.bool),
        edge_ptr=torch.tensor(edge_sizes, dtype=torch.long).cumsum(0),
        edge_index=cat(edge_chunks, torch.long, axis=1, empty=(2, 0)),
        edge_rel=cat(rel_chunks, torch.long),
    )
    return split, duplicates


def source_fingerprint(source: str | Path, split: str) -> str:
    """What identifies a split's content: the file digest, or the hub dataset fingerprint."""
    path = Path(source)
    if path.is_dir():
        return file_digest(find_split_file(path, split))
    if path.is_file():
        return file_digest(path)
    try:
        import datasets

        ds = datasets.load_dataset(str(source), split=split)
        return f"hub:{source}:{ds._fingerprint}"
    except Exception as e:
        raise FileNotFoundError(f"cannot find split {split!r} of {source!r}: {e}") from e


def index_key(source: str | Path, splits: Sequence[str], skip_invalid: bool) -> str:
    prints = {split: source_fingerprint(source, split) for split in splits}
    return stable_hash("kg-index", INDEX_FORMAT, prints, bool(skip_invalid))


def build_index(source: str | Path, splits: Sequence[str], skip_invalid: bool = False) -> KGIndex:
    """Read and validate every split, then encode them against one shared vocabulary."""
    ents, rels = _Vocab(), _Vocab()
    split_graphs, skips = {}, {}
    for split in splits:
        rows, report = load_rows(source, split, skip_invalid=skip_invalid, report=SkipReport())
        split_graphs[split], dups = _encode_split(rows, ents, rels)
        skips[split] = {
            "loaded": report.loaded,
            "skipped": dict(report.counts),
            "duplicate_triples_dropped": dups,
        }
        log.info("%s[%s]: %s; %d duplicate triples dropped", source, split, report.summary(), dups)
    return KGIndex(ents.names(), rels.names(), split_graphs, skips)


def save_index(index: KGIndex, folder: str | Path) -> None:
    """Write the index as a folder: tensors per split, vocab, and a meta file written last."""
    folder = Path(folder)
    with atomic_dir(folder) as tmp:
        files = {}
        torch.save({"entities": index.entities, "relations": index.relations}, tmp / "vocab.pt")
        files["vocab.pt"] = None
        for split, graphs in index.splits.items():
            torch.save(graphs.to_state(), tmp / f"{split}.pt")
            files[f"{split}.pt"] = None
        for name in files:
            files[name] = {"bytes": (tmp / name).stat().st_size, "sha256": file_digest(tmp / name)}
        write_json(
            tmp / "meta.json",
            {"format": INDEX_FORMAT, "key": index.key, "splits": list(index.splits), "files": files,
             "skips": index.skips, "num_entities": len(index.entities),
             "num_relations": len(index.relations)},
        )


class StaleCache(RuntimeError):
    pass


def load_index(folder: str | Path, key: str | None = None, verify: bool = True) -> KGIndex:
    """Load a saved index; raise :class:`StaleCache` if it is missing, stale or damaged."""
    folder = Path(folder)
    meta_path = folder / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise StaleCache(f"{meta_path}: unreadable ({e})") from e
    if meta.get("format") != INDEX_FORMAT:
        raise StaleCache(f"{folder}: index format {meta.get('format')} != {INDEX_FORMAT}")
    if key is not None and meta.get("key") != key:
        raise StaleCache(f"{folder}: built for other inputs ({meta.get('key')} != {key})")
    for name, info in meta["files"].items():
        path = folder / name
        if not path.exists() or path.stat().st_size != info["bytes"]:
            raise StaleCache(f"{path}: missing or truncated")
        if verify and file_digest(path) != info["sha256"]:
            raise StaleCache(f"{path}: content does not match its checksum")
    try:
        vocab = torch.load(folder / "vocab.pt", weights_only=True)
        splits = {s: SplitGraphs(**torch.load(folder / f"{s}.pt", weights_only=True)) for s in meta["splits"]}
    except Exception as e:  # a damaged file that kept its size
        raise StaleCache(f"{folder}: cannot be read ({e})") from e
    return KGIndex(vocab["entities"], vocab["relations"], splits, meta.get("skips", {}), meta.get("key", ""))


def default_cache_dir() -> Path:
    import os

    return Path(os.environ.get("GSR_TRAIN_CACHE", Path.home() / ".cache" / "gsr_train"))


def get_index(
    source: str | Path,
    splits: Sequence[str] = ("train", "validation", "test"),
    cache_dir: str | Path | None = None,
    skip_invalid: bool = False,
) -> KGIndex:
    """The cached index of ``source``: loaded when valid, (re)built and saved otherwise."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = index_key(source, splits, skip_invalid)
    folder = cache_dir / "kg_index" / key
    if folder.exists():
        try:
            t0 = time.perf_counter()
            index = load_index(folder, key)
            log.info("KG index loaded from %s in %.2fs", folder, time.perf_counter() - t0)
            return index
        except StaleCache as e:
            log.warning("rebuilding KG index: %s", e)
    t0 = time.perf_counter()
    index = build_index(source, splits, skip_invalid)
    index.key = key
    save_index(index, folder)
    log.info("KG index built in %.1fs and cached at %s", time.perf_counter() - t0, folder)
    return index
