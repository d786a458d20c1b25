"""The KG index: one global entity / relation vocabulary and compact per-question graphs.

Raw rows carry string triples; every later stage wants integers. The index holds

* ``entities`` / ``relations``: the global vocabularies (shared across splits, so a model
  trained on one split can score another), as memory-mapped `StringVocab`;
* per split, a `SplitGraphs`: the local graphs of all questions concatenated in CSR
  form (``ent_ptr`` / ``edge_ptr`` offsets), with local ``edge_index``, global relation ids,
  and topic / answer masks over the local entities, in the narrowest dtypes (int32 ids,
  bool masks, int64 offsets).

`get_index` builds it with the streaming builder (`gsr_train.kg.index_build`)
into a cache folder keyed by the input files' contents and the options, and opens it as
memory maps: opening costs no copy whatever the size, and DDP ranks on one node share the
pages. A folder that is stale, truncated or altered (sizes + checksums in ``meta.json``)
is rebuilt, never trusted. Stages that must not hold a whole split work on
`SplitGraphs.chunks` (question ranges, zero-copy views).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from gsr_train.arrays import file_check, open_array
from gsr_train.config import default_cache_dir  # noqa: F401  (re-exported: kg.index.default_cache_dir)
from gsr_train.data.errors import SplitNotFoundError, UserError, cache_write_error
from gsr_train.data.row_batches import SplitSource
from gsr_train.data.rows import describe_skip_figures, skip_figures
from gsr_train.io import cache_meta, stable_hash
from gsr_train.kg.index_build import INDEX_FORMAT, build_index_folder, build_lock
from gsr_train.kg.vocab import NameIds, StringVocab

log = logging.getLogger(__name__)

# mediators: Freebase ids, raw (m.0abc, g.11x) or as the IRIs a Freebase endpoint answers
# (http://rdf.freebase.com/ns/m.0abc), and RDF blank nodes (_:b0) name nothing
NO_TEXT_PATTERN = re.compile(r"^(?:(?:https?://rdf\.freebase\.com/ns/)?[mg]\.[0-9a-z_]+|_:.*)$")
DEFAULT_CHUNK_EDGES = 1 << 22


def has_text(name: str) -> bool:
    """Raw Freebase ids (``m.0abc``, ``g.11x``) and RDF blank nodes (``_:b0``) carry no useful text."""
    return NO_TEXT_PATTERN.match(name) is None


def names_have_text(names: StringVocab | Sequence[str]) -> np.ndarray:
    """`has_text` of every name, vectorised (Arrow regex over the vocabulary)."""
    arr = names.to_arrow() if isinstance(names, StringVocab) else pa.array(list(names), pa.large_string())
    if len(arr) == 0:
        return np.zeros(0, dtype=bool)
    no_text = pc.match_substring_regex(arr, NO_TEXT_PATTERN.pattern)
    return ~np.asarray(no_text.to_numpy(zero_copy_only=False), dtype=bool)


@dataclass
class QuestionGraph:
    """One question's local graph (a view into `SplitGraphs`)."""

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
    """All local graphs of one split, concatenated (CSR offsets per question).

    Id arrays may be int32 (as stored) or int64 (built in memory); offsets are int64.
    """

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

    def __post_init__(self) -> None:
        self.ent_ptr = self.ent_ptr.long()
        self.edge_ptr = self.edge_ptr.long()

    def __len__(self) -> int:
        return len(self.ids)

    def with_edges(self, edge_ptr: torch.Tensor, edge_index: torch.Tensor, edge_rel: torch.Tensor) -> SplitGraphs:
        """The same questions and nodes with other edges (a masked or perturbed split)."""
        return replace(self, edge_ptr=edge_ptr, edge_index=edge_index, edge_rel=edge_rel)

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

    @property
    def total_edges(self) -> int:
        return int(self.edge_ptr[-1]) if len(self) else 0

    def position(self) -> dict[str, int]:
        return {qid: i for i, qid in enumerate(self.ids)}

    def edge_question(self) -> torch.Tensor:
        """Question index of every edge (``[sum E]``)."""
        return torch.repeat_interleave(torch.arange(len(self)), self.num_edges)

    def edge_owner(self, edge_ids: torch.Tensor) -> torch.Tensor:
        """Question index of the given edges (int64), without a ``[sum E]`` array."""
        return torch.searchsorted(self.edge_ptr, edge_ids.long(), right=True) - 1

    def global_edges_at(self, edge_ids: torch.Tensor) -> torch.Tensor:
        """``[len(edge_ids), 3]`` global (head, relation, tail) ids of some edges (int64)."""
        edge_ids = edge_ids.long().reshape(-1)
        offsets = self.ent_ptr[self.edge_owner(edge_ids)]
        heads = self.entity_ids[self.edge_index[0, edge_ids].long() + offsets]
        tails = self.entity_ids[self.edge_index[1, edge_ids].long() + offsets]
        return torch.stack([heads.long(), self.edge_rel[edge_ids].long(), tails.long()], dim=1)

    def global_edges(self) -> torch.Tensor:
        """``[sum E, 3]`` global (head, relation, tail) ids of every edge (int64)."""
        offsets = torch.repeat_interleave(self.ent_ptr[:-1], self.num_edges)
        heads = self.entity_ids[self.edge_index[0] + offsets]
        tails = self.entity_ids[self.edge_index[1] + offsets]
        return torch.stack([heads.long(), self.edge_rel.long(), tails.long()], dim=1)

    def global_edge_chunks(self, max_edges: int = DEFAULT_CHUNK_EDGES) -> Iterator[torch.Tensor]:
        """`global_edges` run by run (at most ``max_edges`` rows each, in edge order)."""
        for _q0, _q1, part in self.chunks(max_edges):
            yield part.global_edges()

    def slice(self, start: int, stop: int) -> SplitGraphs:
        """Questions ``start:stop`` as a SplitGraphs of views (no copy of the id arrays)."""
        start, stop = max(0, int(start)), min(len(self), int(stop))
        stop = max(stop, start)
        n0, n1 = int(self.ent_ptr[start]), int(self.ent_ptr[stop])
        e0, e1 = int(self.edge_ptr[start]), int(self.edge_ptr[stop])
        return SplitGraphs(
            ids=self.ids[start:stop],
            questions=self.questions[start:stop],
            answers=self.answers[start:stop],
            ent_ptr=self.ent_ptr[start : stop + 1] - n0,
            entity_ids=self.entity_ids[n0:n1],
            topic_mask=self.topic_mask[n0:n1],
            answer_mask=self.answer_mask[n0:n1],
            edge_ptr=self.edge_ptr[start : stop + 1] - e0,
            edge_index=self.edge_index[:, e0:e1],
            edge_rel=self.edge_rel[e0:e1],
        )

    def chunk_bounds(self, max_edges: int = DEFAULT_CHUNK_EDGES) -> list[tuple[int, int]]:
        """Consecutive question ranges of at most ``max_edges`` edges (at least one question)."""
        ptr = self.edge_ptr.numpy()
        bounds, q0, n = [], 0, len(self)
        while q0 < n:
            q1 = int(np.searchsorted(ptr, ptr[q0] + max_edges, side="right")) - 1
            q1 = min(max(q1, q0 + 1), n)
            bounds.append((q0, q1))
            q0 = q1
        return bounds

    def chunks(self, max_edges: int = DEFAULT_CHUNK_EDGES) -> Iterator[tuple[int, int, SplitGraphs]]:
        """``(start, stop, view)`` over the split in question ranges of at most ``max_edges``
        edges: stages that must not hold per-edge arrays of a whole split loop over these."""
        for q0, q1 in self.chunk_bounds(max_edges):
            yield q0, q1, self.slice(q0, q1)

    def subset(self, indices: Sequence[int]) -> SplitGraphs:
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
    """Global vocabularies plus the local graphs of every split.

    ``action``: what `get_index` did to produce it (``opened``, ``built``, ``resumed``,
    ``rebuilt damaged cache``, ``waited for another builder``), for logs and summaries.
    """

    entities: StringVocab
    relations: StringVocab
    splits: dict[str, SplitGraphs]
    skips: dict[str, dict]
    key: str = ""
    meta: dict = field(default_factory=dict)
    action: str = "opened"

    def __post_init__(self) -> None:
        self.entities = StringVocab.coerce(self.entities)
        self.relations = StringVocab.coerce(self.relations)

    def __getitem__(self, split: str) -> SplitGraphs:
        if split not in self.splits:
            raise KeyError(f"split {split!r} not in the index (have {sorted(self.splits)})")
        return self.splits[split]

    def __reduce_ex__(self, protocol):
        """An index opened from its folder pickles as the folder: a DDP rank started with
        ``ddp_spawn`` maps the same files again (pages shared through the page cache) instead
        of receiving a copy of every array."""
        folder = self.meta.get("folder") if isinstance(self.meta, dict) else None
        if folder and Path(folder, "meta.json").exists():
            return open_index, (folder, self.key or None, False)
        return super().__reduce_ex__(protocol)

    def skip_summary(self) -> dict[str, dict]:
        """Per split, JSON-ready: rows ``loaded``, ``skipped_rows`` and ``skipped`` per reason,
        ``truncated_files`` (file, line of the cut), ``rows_lost`` (a lower bound when
        ``rows_lost_exact`` is false: a truncated file's lost tail has no known length) and
        ``duplicate_triples_dropped``. The skips are made when the index is built; every run
        that reuses the index logs these (``describe_skips``) and writes them with its metrics."""
        return {split: skip_figures(self.skips.get(split) or {}, len(graphs)) for split, graphs in self.splits.items()}

    def describe_skips(self) -> str:
        """The skip summary as one log line (``train: 95 loaded, none skipped, ... truncated ...``)."""
        return "; ".join(describe_skip_figures(split, fig) for split, fig in self.skip_summary().items())

    def entity_has_text(self) -> torch.Tensor:
        return torch.from_numpy(names_have_text(self.entities))

    def entity_lookup(self) -> NameIds:
        """``name -> id`` of the entity vocabulary (a hashed, memory-mapped mapping)."""
        return self.entities.mapping()

    def relation_lookup(self) -> NameIds:
        return self.relations.mapping()

    def triple_strings(self, split: str, i: int) -> list[list[str]]:
        g = self[split].graph(i)
        heads = self.entities.take(g.entity_ids[g.edge_index[0].long()].numpy())
        tails = self.entities.take(g.entity_ids[g.edge_index[1].long()].numpy())
        rels = self.relations.take(g.edge_rel.numpy())
        return [[h, r, t] for h, r, t in zip(heads, rels, tails)]


# ----------------------------------------------------------------------------- cache folder


class StaleCache(RuntimeError):
    pass


def source_fingerprint(source: str | Path, split: str) -> str:
    """What identifies a split's content: the digests of all its files (every shard), or the
    hub dataset fingerprint."""
    try:
        return SplitSource(source, split).fingerprint()
    except (UserError, FileNotFoundError, FileExistsError):  # already name the split and the files
        raise
    except Exception as e:
        raise SplitNotFoundError(f"cannot find split {split!r} of {source!r}: {e}") from e


def index_key(source: str | Path, splits: Sequence[str], skip_invalid: bool) -> str:

    prints = {split: source_fingerprint(source, split) for split in splits}
    return stable_hash("kg-index", INDEX_FORMAT, prints, bool(skip_invalid))


def _read_questions(path: Path) -> tuple[list[str], list[str], list[list[str]]]:
    ids, questions, answers = [], [], []
    with open(path, "rb") as f:
        for line in f:
            qid, question, ans = json.loads(line)
            ids.append(qid)
            questions.append(question)
            answers.append(ans)
    return ids, questions, answers


def open_index(folder: str | Path, key: str | None = None, verify: bool = True) -> KGIndex:
    """Open a built index folder as memory maps; `StaleCache` if it is missing,
    stale or damaged (sizes always checked; checksums when ``verify``)."""
    folder = Path(folder)
    meta = cache_meta(folder / "meta.json", INDEX_FORMAT, key, folder, StaleCache)
    files = meta.get("files") or {}
    for name, info in files.items():
        path = folder / name
        if not path.exists() or path.stat().st_size != info["bytes"]:
            raise StaleCache(f"{path}: missing or truncated")
        if verify and file_check(path) != info["check"]:
            raise StaleCache(f"{path}: content does not match its checksum")

    def array(rel: str) -> np.ndarray:
        info = files[f"{rel}.bin"]
        return open_array(folder / f"{rel}.bin", info["dtype"], tuple(info["shape"]))

    try:
        vocabs = {
            name: StringVocab(
                array(f"vocab/{name}.offsets"),
                array(f"vocab/{name}.data"),
                array(f"vocab/{name}.table"),
                array(f"vocab/{name}.hashes"),
            )
            for name in ("entities", "relations")
        }
        splits = {}
        for s in meta["splits"]:
            ids, questions, answers = _read_questions(folder / s / "questions.jsonl")
            t = {
                name: torch.from_numpy(array(f"{s}/{name}"))
                for name in ("ent_ptr", "entity_ids", "topic_mask", "answer_mask", "edge_ptr", "edge_index", "edge_rel")
            }
            splits[s] = SplitGraphs(ids, questions, answers, **t)
            if len(ids) + 1 != t["ent_ptr"].numel():
                raise ValueError(f"{s}: {len(ids)} questions but {t['ent_ptr'].numel() - 1} graphs")
    except (KeyError, ValueError, OSError, json.JSONDecodeError) as e:  # a damaged file that kept its size
        raise StaleCache(f"{folder}: cannot be read ({type(e).__name__}: {e})") from e
    return KGIndex(
        vocabs["entities"],
        vocabs["relations"],
        splits,
        meta.get("skips", {}),
        meta.get("key", ""),
        {**meta, "folder": str(folder)},
    )


def build_index(
    source: str | Path,
    splits: Sequence[str],
    skip_invalid: bool = False,
    batch_rows: int = 64,
    workers: int | None = None,
) -> KGIndex:
    """Build an index without a cache (a temporary folder, mapped then removed)."""
    tmp = Path(tempfile.mkdtemp(prefix="gsr-kg-index-"))
    try:
        build_index_folder(
            source,
            splits,
            tmp / "index",
            skip_invalid=skip_invalid,
            batch_rows=batch_rows,
            show_progress=False,
            workers=workers,
        )
        index = open_index(tmp / "index", verify=False)  # the maps outlive the files' names
        index.action = "built"
        return index
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def get_index(
    source: str | Path,
    splits: Sequence[str] = ("train", "validation", "test"),
    cache_dir: str | Path | None = None,
    skip_invalid: bool = False,
    batch_rows: int = 64,
    show_progress: bool | None = None,
    allow_overlap: bool = False,
    workers: int | None = None,
) -> KGIndex:
    """The cached index of ``source``: opened when valid, (re)built and saved otherwise.

    ``workers``: threads of a build (``None``: the process default, `gsr_train.parallel`);
    not part of the cache key, since the files are the same bytes whatever the count.

    A question id or a whole row (question, answers, triples) found in two splits is
    train/test leakage: `SplitOverlapError` naming them, unless ``allow_overlap``.
    A cache folder that cannot be written (read-only, full disk) is a
    `gsr_train.data.errors.CacheWriteError` saying so. ``index.action`` says what was done.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = index_key(source, splits, skip_invalid)
    folder = cache_dir / "kg_index" / key
    damaged: list[str] = []

    def try_open() -> KGIndex | None:
        if not folder.exists():
            return None
        try:
            t0 = time.perf_counter()
            index = open_index(folder, key)
            log.info("KG index opened from %s in %.2fs", folder, time.perf_counter() - t0)
            return index
        except StaleCache as e:
            if not damaged:
                log.warning("rebuilding KG index: %s", e)
            damaged.append(str(e))
            return None

    index = try_open()
    if index is None:
        try:
            index = _build_locked(
                source,
                splits,
                folder,
                key,
                try_open,
                damaged,
                skip_invalid=skip_invalid,
                batch_rows=batch_rows,
                show_progress=show_progress,
                workers=workers,
            )
        except OSError as e:
            error = cache_write_error(e, cache_dir, "the KG index")
            if error is None:
                raise
            raise error from e
    check_overlap(index, source, allow_overlap)
    return index


def _build_locked(
    source: str | Path, splits: Sequence[str], folder: Path, key: str, try_open, damaged: list, **options: Any
) -> KGIndex:
    """Build under the folder's lock, unless another builder finished it while this one waited."""
    with build_lock(folder):
        index = try_open()  # another process may have built it while we waited
        if index is not None:
            index.action = "waited for another builder"
            return index
        t0 = time.perf_counter()
        meta = build_index_folder(source, splits, folder, key=key, **options)
        log.info("KG index built in %.1fs and cached at %s", time.perf_counter() - t0, folder)
        index = open_index(folder, key, verify=False)
    build = meta.get("build") or {}
    index.action = "resumed" if build.get("resumed") else "rebuilt damaged cache" if damaged else "built"
    return index


class SplitOverlapError(UserError, ValueError):
    """The same question id or the same row is in two splits (train/test leakage)."""


def check_overlap(index: KGIndex, source: Any, allow: bool = False) -> None:
    """Raise `SplitOverlapError` (or log a warning when ``allow``) for leaked examples."""
    overlap = index.meta.get("overlap") or {}
    if not overlap:
        return
    lines = []
    for kind, what in (("ids", "question ids"), ("rows", "identical rows (question, answers, entities, triples)")):
        for pair, found in (overlap.get(kind) or {}).items():
            a, b = pair.split("|")
            lines.append(f"{found['count']} {what} in both {a!r} and {b!r}, e.g. {', '.join(found['examples'][:5])}")
    message = f"{source}: " + "; ".join(lines)
    if allow:
        log.warning("%s (allowed by allow_overlap)", message)
        return
    raise SplitOverlapError(message + ". Fix the splits, or set data.allow_overlap=true to use them anyway")
