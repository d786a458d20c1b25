"""GSR training data: retrieval examples, indexing examples, and the Lightning DataModule.

* **Retrieval** examples ``[Retrieval] question -> r1 r2 ...``. Chains come in three
  variants: ``raw`` (every shortest topic->answer chain), ``filtered`` and ``llm``
  (LLM-selected, read from a file whose rows carry ``llm_paths`` or ``gpt_paths``).
  For RoG datasets ``raw`` / ``filtered`` are the KG supervision's ``chains_raw`` /
  ``chains_filtered`` (filtered = paths that run forward from the topic entity). For
  ``webqsp_paths`` rows (no graph, no direction information) ``filtered`` is a heuristic
  (:func:`filter_chains`): drop chains that repeat a relation back to back (the
  ``gender -> gender`` loops through a hub; also CVT round trips such as ``spouse_s ->
  spouse_s``, which the paper's direction rule drops too) and chains through Freebase
  meta relations (``common.*``, ``freebase.*``, ``type.*``...). On webqsp_paths train this
  keeps 8,143 of 9,745 chains and 97% of the GPT-selected ones.
* **Indexing** examples ``[Index] pseudo question -> r``: questions about a relation
  written from templates with a ``[SUBJECT]`` slot filled with real subject entities
  (heads of that relation in the KG index). Without an LLM the templates come from the
  relation's name (:func:`default_templates`); an LLM template file (rows with
  ``templates``, ``template`` or ready-made ``question``) replaces them per relation.
* The DataModule draws each epoch's examples according to the schedule: ``joint``
  (retrieval + a share of indexing examples every epoch), ``retrieval`` (no indexing),
  ``index_then_retrieval`` / ``index_then_joint`` (indexing only for the first
  ``index_epochs`` epochs). A retrieval example holds *all* chains of its question as
  targets, so the encoder runs once per question, not once per chain.
"""
from __future__ import annotations

import json
import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch

from gsr_train.data.rows import RowError, find_split_file
from gsr_train.io import iter_jsonl, stable_hash
from gsr_train.kg.index import KGIndex
from gsr_train.models.gsr.tokens import INDEX_PREFIX, RETRIEVAL_PREFIX, relation_words

log = logging.getLogger(__name__)

Chain = tuple[str, ...]
VARIANTS = ("raw", "filtered", "llm")
SCHEDULES = ("joint", "retrieval", "index_then_retrieval", "index_then_joint")
META_PREFIXES = ("common.", "freebase.", "type.", "kg.", "user.", "dataworld.", "base.type_ontology.")


# ----------------------------------------------------------------------- path rows
@dataclass
class PathRow:
    """A row of a chain-supervision file (``webqsp_paths``): no graph, only chains."""

    id: str
    question: str
    ground_paths: list[Chain]
    llm_paths: list[Chain] | None = None  # ``llm_paths`` or ``gpt_paths`` when present


def _chains_field(value: Any, source: str, row_id: str, name: str) -> list[Chain]:
    if not isinstance(value, list):
        raise RowError(source, row_id, name, f"expected a list of relation lists, got {type(value).__name__}")
    out = []
    for k, chain in enumerate(value):
        if not isinstance(chain, list) or not all(isinstance(r, str) and r and not r.isspace() for r in chain):
            raise RowError(source, row_id, name, f"chain #{k} is not a list of relation names: {chain!r}")
        out.append(tuple(chain))
    return out


def _jsonl_records(path: Path):
    for lineno, record in iter_jsonl(path):
        if isinstance(record, json.JSONDecodeError):
            raise RowError(str(path), f"line {lineno}", "<json>", record.msg)
        yield lineno, record


def load_path_rows(source: str | Path, split: str | None = None) -> list[PathRow]:
    """Rows ``{id, question, ground_paths[, gpt_paths | llm_paths]}`` from a folder + split or a file.

    Every row is validated; errors name the file, the row id and the field.
    """
    path = Path(source)
    if path.is_dir():
        if split is None:
            raise ValueError(f"{path} is a folder: give the split to read")
        path = find_split_file(path, split)
    if not path.exists():
        raise FileNotFoundError(f"chain-supervision file {path} does not exist")
    rows, seen = [], set()
    for lineno, raw in _jsonl_records(path):
        where = f"line {lineno}"
        if not isinstance(raw, dict):
            raise RowError(str(path), where, "<row>", f"expected a JSON object, got {type(raw).__name__}")
        rid = raw.get("id")
        if not isinstance(rid, str) or not rid:
            raise RowError(str(path), where, "id", "missing or not a non-empty string")
        if rid in seen:
            raise RowError(str(path), rid, "id", "duplicate id")
        seen.add(rid)
        question = raw.get("question")
        if not isinstance(question, str) or not question.strip():
            raise RowError(str(path), rid, "question", "missing or empty")
        if "ground_paths" not in raw:
            raise RowError(str(path), rid, "ground_paths", "missing")
        ground = _chains_field(raw["ground_paths"], str(path), rid, "ground_paths")
        llm = None
        for name in ("llm_paths", "gpt_paths"):
            if name in raw and raw[name] is not None:
                llm = _chains_field(raw[name], str(path), rid, name)
                break
        rows.append(PathRow(rid, question, ground, llm))
    log.info("%s: %d chain-supervision rows", path, len(rows))
    return rows


def load_llm_chains(path: str | Path) -> dict[str, list[Chain]]:
    """LLM-selected chains per question id from rows with ``llm_paths`` (or ``gpt_paths``)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"LLM-selected chains file {path} does not exist")
    out: dict[str, list[Chain]] = {}
    for lineno, raw in _jsonl_records(path):
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            raise RowError(str(path), f"line {lineno}", "id", "missing or not a string")
        for name in ("llm_paths", "gpt_paths"):
            if name in raw:
                out[raw["id"]] = _chains_field(raw[name], str(path), raw["id"], name)
                break
        else:
            raise RowError(str(path), raw["id"], "llm_paths", "missing (expected llm_paths or gpt_paths)")
    return out


def filter_chains(chains: Iterable[Chain], drop_repeats: bool = True,
                  drop_prefixes: Sequence[str] = META_PREFIXES) -> list[Chain]:
    """The direction-free ``filtered`` heuristic (see the module docstring); empty chains dropped."""
    out = []
    prefixes = tuple(drop_prefixes or ())
    for c in chains:
        if not c:
            continue
        if drop_repeats and any(a == b for a, b in zip(c, c[1:])):
            continue
        if prefixes and any(r.startswith(prefixes) for r in c):
            continue
        out.append(tuple(c))
    return out


def _dedup(chains: Iterable[Chain]) -> list[Chain]:
    return list(dict.fromkeys(tuple(c) for c in chains if len(c)))


# ----------------------------------------------------------------------- questions
@dataclass
class ChainQuestion:
    """One question with its training chains (chosen variant) and its ground chains (for metrics)."""

    id: str
    question: str
    chains: list[Chain]
    ground: list[Chain]


def questions_from_paths(rows: Sequence[PathRow], variant: str = "raw",
                         llm: Mapping[str, list[Chain]] | None = None,
                         filter_options: Mapping[str, Any] | None = None) -> list[ChainQuestion]:
    """ChainQuestions from path rows; ``llm`` (id -> chains) overrides the rows' own gpt/llm paths."""
    if variant not in VARIANTS:
        raise ValueError(f"retrieval variant must be one of {VARIANTS}, got {variant!r}")
    out = []
    missing = 0
    for row in rows:
        if variant == "raw":
            chains = _dedup(row.ground_paths)
        elif variant == "filtered":
            chains = _dedup(filter_chains(row.ground_paths, **dict(filter_options or {})))
        else:
            chosen = llm.get(row.id) if llm is not None else row.llm_paths
            if chosen is None:
                missing += 1
                chosen = []
            chains = _dedup(chosen)
        out.append(ChainQuestion(row.id, row.question, chains, _dedup(row.ground_paths)))
    if variant == "llm" and missing:
        log.warning("%d of %d questions have no LLM-selected chains (trained without them)", missing, len(rows))
    return out


def questions_from_kg(index: KGIndex, split: str, supervision, variant: str = "raw",
                      llm: Mapping[str, list[Chain]] | None = None) -> list[ChainQuestion]:
    """ChainQuestions of a RoG split from its shortest-path supervision (``kg.paths``)."""
    if variant not in VARIANTS:
        raise ValueError(f"retrieval variant must be one of {VARIANTS}, got {variant!r}")
    if variant == "llm" and llm is None:
        raise ValueError("retrieval variant 'llm' needs a file of LLM-selected chains (gsr.llm_chains=...)")
    graphs = index[split]
    names = index.relations
    out = []
    for i, (qid, q) in enumerate(zip(graphs.ids, graphs.questions)):
        raw = [tuple(names[r] for r in c) for c in supervision.chains_raw[i]]
        if variant == "raw":
            chains = raw
        elif variant == "filtered":
            chains = [tuple(names[r] for r in c) for c in supervision.chains_filtered[i]]
        else:
            chains = list(llm.get(qid, []))
        out.append(ChainQuestion(qid, q, _dedup(chains), _dedup(raw)))
    return out


def chain_relations(questions: Iterable[ChainQuestion], ground: bool = False) -> list[str]:
    """Relation names used by the training chains (``ground=True``: by the ground chains too)."""
    seen: dict[str, None] = {}
    for q in questions:
        for c in (q.chains + q.ground) if ground else q.chains:
            for r in c:
                seen.setdefault(r, None)
    return list(seen)


# ----------------------------------------------------------------------- indexing data
_TEMPLATES = (
    "what is the {p} of [SUBJECT]",
    "what {p} does [SUBJECT] have",
    "[SUBJECT] {p}",
    "which {p} is linked to the {t} [SUBJECT]",
    "tell me the {p} of [SUBJECT]",
    "who or what is the {p} of [SUBJECT]",
    "what is [SUBJECT]'s {p}",
    "find the {p} for the {t} [SUBJECT]",
    "name the {p} of [SUBJECT]",
    "[SUBJECT] is a {t}; what is its {p}",
)


def default_templates(relation: str) -> list[str]:
    """Offline pseudo-question templates from a relation's name (property words + type words)."""
    parts = relation.split(".")
    prop = relation_words(parts[-1]) if parts else relation
    typ = relation_words(parts[-2]) if len(parts) >= 2 else "thing"
    if prop.endswith(" s"):  # Freebase mediator names: spouse_s, sibling_s
        prop = prop[:-2]
    return [t.format(p=prop, t=typ) for t in _TEMPLATES]


@dataclass
class IndexSources:
    """LLM-written templates and/or ready-made pseudo questions per relation."""

    templates: dict[str, list[str]] = field(default_factory=dict)
    questions: dict[str, list[str]] = field(default_factory=dict)
    dropped: Counter = field(default_factory=Counter)


def load_index_file(path: str | Path) -> IndexSources:
    """Read LLM indexing data: JSONL rows ``{"relation", "templates": [...]}``,
    ``{"relation", "template"}`` or ``{"relation", "question"}`` (filled), or a JSON object
    ``{relation: [templates]}``. Templates without exactly one ``[SUBJECT]`` are dropped (counted).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"indexing template file {path} does not exist")
    src = IndexSources()

    def add_template(rel: str, t: str) -> None:
        if not isinstance(t, str) or t.count("[SUBJECT]") != 1:
            src.dropped["template without exactly one [SUBJECT]"] += 1
            return
        src.templates.setdefault(rel, [])
        if t not in src.templates[rel]:
            src.templates[rel].append(t)

    if path.suffix == ".json":
        obj = json.loads(path.read_text())
        if not isinstance(obj, dict):
            raise ValueError(f"{path}: expected a JSON object relation -> list of templates")
        for rel, ts in obj.items():
            if not isinstance(ts, list):
                raise RowError(str(path), rel, "templates", "expected a list of strings")
            for t in ts:
                add_template(rel, t)
        return src
    for lineno, raw in _jsonl_records(path):
        if not isinstance(raw, dict) or not isinstance(raw.get("relation"), str):
            raise RowError(str(path), f"line {lineno}", "relation", "missing or not a string")
        rel = raw["relation"]
        if "question" in raw:
            if not isinstance(raw["question"], str) or not raw["question"].strip():
                raise RowError(str(path), f"line {lineno}", "question", "not a non-empty string")
            src.questions.setdefault(rel, []).append(raw["question"])
        elif "templates" in raw:
            if not isinstance(raw["templates"], list):
                raise RowError(str(path), f"line {lineno}", "templates", "expected a list of strings")
            for t in raw["templates"]:
                add_template(rel, t)
        elif "template" in raw:
            add_template(rel, raw["template"])
        else:
            raise RowError(str(path), f"line {lineno}", "templates", "row has none of templates / template / question")
    if src.dropped:
        log.warning("%s: %s", path, dict(src.dropped))
    return src


def relation_subjects(index: KGIndex | None, splits: Sequence[str] = ("train",), exclude: Iterable[str] = (),
                      per_relation: int = 10, seed: int = 0) -> dict[str, list[str]]:
    """Up to ``per_relation`` distinct named heads of every relation in the given splits' graphs.

    Raw Freebase ids (``m.xxx``) never serve as subjects; ``exclude`` (e.g. the topic
    entities of evaluation questions) keeps test supervision out of the indexing data.
    Sampling is seeded and vectorised (one unique over packed (relation, head) keys).
    """
    if index is None:
        return {}
    lookup = index.entity_lookup()
    named = index.entity_has_text()
    ban = torch.zeros(len(index.entities), dtype=torch.bool)
    ids = [lookup[e] for e in exclude if e in lookup]
    if ids:
        ban[torch.tensor(ids)] = True
    num_e = len(index.entities)
    parts = []  # distinct (relation, head) keys run by run (bounded memory on CWQ-sized splits)
    for s in splits:
        if s not in index.splits:
            continue
        for g in index[s].global_edge_chunks():
            keep = named[g[:, 0]] & ~ban[g[:, 0]]
            parts.append(torch.unique(g[keep, 1] * num_e + g[keep, 0]))
    if not parts:
        return {}
    keys = torch.unique(torch.cat(parts)).numpy()
    rng = np.random.default_rng(seed)
    noise = rng.random(len(keys))
    rel = keys // num_e
    order = np.lexsort((noise, rel))
    rel, head = rel[order], (keys % num_e)[order]
    starts = np.flatnonzero(np.r_[True, rel[1:] != rel[:-1]])
    rank = np.arange(len(rel)) - np.repeat(starts, np.diff(np.r_[starts, len(rel)]))
    take = rank < per_relation
    out: dict[str, list[str]] = {}
    for r, h in zip(rel[take].tolist(), head[take].tolist()):
        out.setdefault(index.relations[r], []).append(index.entities[h])
    return out


@dataclass
class IndexExample:
    text: str
    relation: str


def pseudo_questions(relations: Sequence[str], subjects: Mapping[str, Sequence[str]],
                     sources: IndexSources | None = None, per_relation: int = 10, seed: int = 0,
                     fallback_subject: bool = True) -> list[IndexExample]:
    """``per_relation`` pseudo questions per relation (templates x subjects, seeded).

    LLM questions / templates for a relation are used when given, else the name templates.
    A relation without a KG subject gets ``the <type>`` as its subject when
    ``fallback_subject`` (else it gets no indexing example). Text is lower-cased, like
    WebQSP questions.
    """
    out = []
    for rel in relations:
        rng = random.Random(stable_hash("gsr-index", seed, rel))
        if sources is not None and sources.questions.get(rel):
            qs = list(sources.questions[rel])
            rng.shuffle(qs)
            out.extend(IndexExample(q.lower(), rel) for q in qs[:per_relation])
            continue
        templates = (sources.templates.get(rel) if sources is not None else None) or default_templates(rel)
        subj = list(subjects.get(rel, ()))
        if not subj:
            if not fallback_subject:
                continue
            parts = rel.split(".")
            subj = [f"the {relation_words(parts[-2]) if len(parts) >= 2 else 'entity'}"]
        order = list(range(len(templates)))
        rng.shuffle(order)
        rng.shuffle(subj)
        for j in range(per_relation):
            t = templates[order[j % len(order)]]
            s = subj[j % len(subj)]
            out.append(IndexExample(" ".join(t.replace("[SUBJECT]", s).lower().split()), rel))
    return out


# ----------------------------------------------------------------------- torch side
@dataclass
class Seq2SeqItem:
    """One source sequence with every target chain (relation indices) it should produce."""

    prefix: str
    text: str
    targets: list[tuple[int, ...]]
    ground: list[Chain] = field(default_factory=list)  # names, for chain-match metrics
    id: str = ""


def retrieval_items(questions: Sequence[ChainQuestion], relations, max_targets: int | None = None,
                    require_targets: bool = True, strict: bool = True) -> tuple[list[Seq2SeqItem], Counter]:
    """Retrieval items in the model's relation-index space.

    ``strict``: a training chain with a relation outside the vocabulary is an error; otherwise
    the chain is dropped and counted (validation ground chains may use unseen relations).
    """
    items, counts = [], Counter()
    for q in questions:
        targets = []
        for c in q.chains:
            try:
                targets.append(tuple(relations.indices(c)))
            except KeyError as e:
                if strict:
                    raise KeyError(f"question {q.id!r}: chain {list(c)} uses a relation outside the model vocabulary: {e}") from None
                counts["chains_outside_vocab"] += 1
        if max_targets is not None and len(targets) > max_targets:
            counts["targets_capped"] += len(targets) - max_targets
            targets = targets[:max_targets]
        if require_targets and not targets:
            counts["questions_without_chains"] += 1
            continue
        items.append(Seq2SeqItem(RETRIEVAL_PREFIX, q.question, targets, list(q.ground), q.id))
    return items, counts


def index_items(examples: Sequence[IndexExample], relations) -> list[Seq2SeqItem]:
    return [Seq2SeqItem(INDEX_PREFIX, e.text, [(relations.index(e.relation),)]) for e in examples
            if e.relation in relations.lookup]


class GSRCollator:
    """Tokenise sources per batch; labels hold every target of every source (owner index)."""

    def __init__(self, gsr) -> None:
        self.gsr = gsr

    def __call__(self, items: Sequence[Seq2SeqItem]) -> dict:
        texts = [f"{it.prefix} {it.text}" for it in items]
        enc = self.gsr.encode(texts, prefix=None)
        targets = [t for it in items for t in it.targets]
        owner = torch.tensor([i for i, it in enumerate(items) for _ in it.targets], dtype=torch.long)
        batch = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                 "labels": self.gsr.labels(targets) if targets else torch.zeros(0, 1, dtype=torch.long),
                 "owner": owner, "ground": [it.ground for it in items], "ids": [it.id for it in items],
                 "texts": [it.text for it in items],
                 "is_retrieval": torch.tensor([it.prefix == RETRIEVAL_PREFIX for it in items])}
        return batch


class GSRDataModule:
    """Epoch-dependent training mix (see module doc) and a fixed validation set.

    A LightningDataModule subclass is created lazily (``as_lightning``) so this module
    imports without Lightning; the runner uses ``GSRDataModule(...).as_lightning()``.
    """

    def __init__(self, gsr, retrieval: Sequence[Seq2SeqItem], index_pool: Sequence[Seq2SeqItem],
                 validation: Sequence[Seq2SeqItem], schedule: str = "joint", index_epochs: int = 0,
                 index_ratio: float = 1.0, batch_size: int = 32, eval_batch_size: int = 64, seed: int = 0,
                 max_targets: int | None = None) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"gsr.schedule must be one of {SCHEDULES}, got {schedule!r}")
        if schedule.startswith("index_then") and index_epochs < 1:
            raise ValueError(f"schedule {schedule!r} needs index_epochs >= 1")
        if schedule != "retrieval" and not index_pool:
            raise ValueError(f"schedule {schedule!r} needs indexing examples, but the pool is empty")
        if not retrieval and schedule != "index_then_retrieval":
            raise ValueError("no retrieval training examples")
        self.gsr = gsr
        self.retrieval = list(retrieval)
        self.index_pool = list(index_pool)
        self.validation = list(validation)
        self.schedule = schedule
        self.index_epochs = int(index_epochs)
        self.index_ratio = float(index_ratio)
        self.batch_size = int(batch_size)
        self.eval_batch_size = int(eval_batch_size)
        self.seed = int(seed)
        self.max_targets = int(max_targets) if max_targets else None
        self.collate = GSRCollator(gsr)

    def phase(self, epoch: int) -> str:
        """``index`` | ``retrieval`` | ``joint`` for an epoch."""
        if self.schedule.startswith("index_then") and epoch < self.index_epochs:
            return "index"
        if self.schedule in ("retrieval", "index_then_retrieval"):
            return "retrieval"
        return "joint"

    def epoch_items(self, epoch: int) -> list[Seq2SeqItem]:
        phase = self.phase(epoch)
        rng = random.Random(stable_hash("gsr-epoch", self.seed, epoch))
        if phase == "index":
            items = list(self.index_pool)
        else:
            items = [self._cap(it, rng) for it in self.retrieval]
            if phase == "joint":
                n = min(len(self.index_pool), int(round(self.index_ratio * len(self.retrieval))))
                items += rng.sample(self.index_pool, n)
        rng.shuffle(items)
        return items

    def _cap(self, item: Seq2SeqItem, rng: random.Random) -> Seq2SeqItem:
        """At most ``max_targets`` chains per question, a fresh random subset every epoch."""
        if self.max_targets is None or len(item.targets) <= self.max_targets:
            return item
        return Seq2SeqItem(item.prefix, item.text, rng.sample(item.targets, self.max_targets), item.ground, item.id)

    def steps_per_epoch(self, epoch: int = 0) -> int:
        return max(1, -(-len(self.epoch_items(epoch)) // self.batch_size))

    def train_loader(self, epoch: int, skip_batches: int = 0, resume=None):
        """``resume``: a :class:`~gsr_train.datamodules.triple_datamodule.ResumeSkip` read when the first pass starts."""
        from torch.utils.data import DataLoader

        from gsr_train.datamodules.triple_datamodule import RankSampler

        items = self.epoch_items(epoch)  # already shuffled per epoch; sharded by rank under DDP
        sampler = RankSampler(len(items), shuffle=False)
        sampler.skip = skip_batches * self.batch_size
        sampler.resume = resume
        return DataLoader(items, batch_size=self.batch_size, sampler=sampler, collate_fn=self.collate)

    def rank_batches(self, epoch: int) -> int:
        """Training batches of ``epoch`` on this rank (under DDP each rank holds 1/W of the items)."""
        from gsr_train.datamodules.triple_datamodule import RankSampler

        return max(1, -(-len(RankSampler(len(self.epoch_items(epoch)), shuffle=False)) // self.batch_size))

    def val_loader(self):
        from torch.utils.data import DataLoader

        return DataLoader(self.validation, batch_size=self.eval_batch_size, shuffle=False, collate_fn=self.collate)

    def as_lightning(self):
        return make_lightning_datamodule(self)


def _lightning_class():
    import pytorch_lightning as pl

    class LightningGSRData(pl.LightningDataModule):
        def __init__(self, data: GSRDataModule) -> None:
            super().__init__()
            self.gsr_data = data

        def train_dataloader(self):
            from gsr_train.datamodules.triple_datamodule import ResumeSkip

            if self.trainer is None:
                return self.gsr_data.train_loader(0)
            # mid-epoch resume: the skip is read when the pass starts (the loader may be built
            # before Lightning restores the step counters)
            resume = ResumeSkip(self.trainer, self.gsr_data.rank_batches, self.gsr_data.batch_size)
            return self.gsr_data.train_loader(self.trainer.current_epoch, resume=resume)

        def val_dataloader(self):
            return self.gsr_data.val_loader() if self.gsr_data.validation else []

    LightningGSRData.__module__ = __name__
    LightningGSRData.__qualname__ = "LightningGSRData"
    return LightningGSRData


def __getattr__(name: str):
    """``LightningGSRData`` is built on first use, so this module imports without Lightning;
    a module-level name (not a local class) lets DDP spawn pickle the data module."""
    if name == "LightningGSRData":
        cls = _lightning_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_lightning_datamodule(owner: GSRDataModule):
    """The Lightning side of :class:`GSRDataModule`.

    Under DDP the training items of an epoch are sharded by rank (rank ``r`` takes items
    ``r, r + W, ...`` of the epoch's order), so W ranks with batch B see the same items per
    optimiser step as one process with batch ``W * B``; validation is sharded by Lightning
    and merged by :class:`~gsr_train.models.gsr.module.GSRModule`.
    """
    import sys

    return getattr(sys.modules[__name__], "LightningGSRData")(owner)
