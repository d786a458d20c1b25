"""GSR training data: retrieval examples, indexing examples, and the Lightning DataModule.

* **Retrieval** examples ``[Retrieval] question -> r1 r2 ...``. Chains come in three
  variants: ``raw`` (every shortest topic->answer chain), ``filtered`` and ``llm``
  (LLM-selected, read from a file whose rows carry ``llm_paths`` or ``gpt_paths``).
  For RoG datasets ``raw`` / ``filtered`` are the KG supervision's ``chains_raw`` /
  ``chains_filtered`` (filtered = paths that run forward from the topic entity). For
  ``webqsp_paths`` rows (no graph, no direction information) ``filtered`` is a heuristic
  (`filter_chains`): drop chains that repeat a relation back to back (the
  ``gender -> gender`` loops through a hub; also CVT round trips such as ``spouse_s ->
  spouse_s``, which the paper's direction rule drops too) and chains through Freebase
  meta relations (``common.*``, ``freebase.*``, ``type.*``...). On webqsp_paths train this
  keeps 8,143 of 9,745 chains and 97% of the GPT-selected ones.
* **Indexing** examples ``[Index] pseudo question -> r``: questions about a relation
  written from templates with a ``[SUBJECT]`` slot filled with real subject entities
  (heads of that relation in the KG index). Without an LLM the templates come from the
  relation's name (`default_templates`); an LLM template file (rows with
  ``templates``, ``template`` or ready-made ``question``) replaces them per relation.
* **Walks** (optional, ``gsr.walks``): random walks of 2-4 relations over the training
  graphs told as composed pseudo questions (`gsr_walks`), ``walks.ratio`` of them per
  retrieval question in every retrieval or joint epoch.
* The DataModule draws each epoch's examples according to the schedule: ``joint``
  (retrieval + a share of indexing examples every epoch), ``retrieval`` (no indexing),
  ``index_then_retrieval`` / ``index_then_joint`` (indexing only for the first
  ``index_epochs`` epochs). A retrieval example holds *all* chains of its question as
  targets, so the encoder runs once per question, not once per chain.
"""

from __future__ import annotations

import logging
import math
import random
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

# the data jobs live in their own modules; re-exported so one import reaches all GSR data
from gsr_train.datamodules.gsr_chains import (  # noqa: F401
    META_PREFIXES,
    VARIANTS,
    Chain,
    ChainQuestion,
    PathRow,
    chain_relations,
    filter_chains,
    load_llm_chains,
    load_path_rows,
    questions_from_kg,
    questions_from_paths,
)
from gsr_train.datamodules.gsr_indexing import (  # noqa: F401
    IndexExample,
    IndexSources,
    default_templates,
    load_index_file,
    pseudo_questions,
    relation_subjects,
)
from gsr_train.datamodules.triple_datamodule import RankSampler, ResumeSkip
from gsr_train.features.relation_tokens import INDEX_PREFIX, RETRIEVAL_PREFIX
from gsr_train.io import stable_hash

log = logging.getLogger(__name__)

SCHEDULES = ("joint", "retrieval", "index_then_retrieval", "index_then_joint")


# ----------------------------------------------------------------------- torch side
@dataclass
class Seq2SeqItem:
    """One source sequence with every target chain (relation indices) it should produce."""

    prefix: str
    text: str
    targets: list[tuple[int, ...]]
    ground: list[Chain] = field(default_factory=list)  # names, for chain-match metrics
    id: str = ""


def retrieval_items(
    questions: Sequence[ChainQuestion],
    relations,
    max_targets: int | None = None,
    require_targets: bool = True,
    strict: bool = True,
) -> tuple[list[Seq2SeqItem], Counter]:
    """Retrieval items in the model's relation-index space.

    ``strict``: a training chain with a relation outside the vocabulary is an error; otherwise
    the chain is dropped and counted (validation ground chains may use unseen relations).
    """
    items: list[Seq2SeqItem] = []
    counts: Counter[str] = Counter()
    for q in questions:
        targets = []
        for c in q.chains:
            try:
                targets.append(tuple(relations.indices(c)))
            except KeyError as e:
                if strict:
                    raise KeyError(
                        f"question {q.id!r}: chain {list(c)} uses a relation outside the model vocabulary: {e}"
                    ) from None
                counts["chains_outside_vocab"] += 1
        if max_targets is not None and len(targets) > max_targets:
            counts["targets_capped"] += len(targets) - max_targets
            targets = targets[:max_targets]
        if require_targets and not targets:
            counts["questions_without_chains"] += 1
            continue
        items.append(Seq2SeqItem(RETRIEVAL_PREFIX, q.question, targets, list(q.ground), q.id))
    return items, counts


def walk_items(examples, relations, prefix: str = RETRIEVAL_PREFIX) -> tuple[list[Seq2SeqItem], int]:
    """Random-walk examples (`gsr_walks`) as items; walks through a relation outside the
    vocabulary are dropped and counted."""
    items, dropped = [], 0
    for e in examples:
        if all(r in relations.lookup for r in e.chain):
            items.append(Seq2SeqItem(prefix, e.text, [tuple(relations.indices(e.chain))]))
        else:
            dropped += 1
    return items, dropped


def index_items(examples: Sequence[IndexExample], relations) -> list[Seq2SeqItem]:
    return [
        Seq2SeqItem(INDEX_PREFIX, e.text, [(relations.index(e.relation),)])
        for e in examples
        if e.relation in relations.lookup
    ]


class GSRCollator:
    """Tokenise sources per batch; labels hold every target of every source (owner index)."""

    def __init__(self, gsr) -> None:
        self.gsr = gsr

    def __call__(self, items: Sequence[Seq2SeqItem]) -> dict:
        texts = [f"{it.prefix} {it.text}" for it in items]
        enc = self.gsr.encode(texts, prefix=None)
        targets = [t for it in items for t in it.targets]
        owner = torch.tensor([i for i, it in enumerate(items) for _ in it.targets], dtype=torch.long)
        batch = {
            "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"],
            "labels": self.gsr.labels(targets) if targets else torch.zeros(0, 1, dtype=torch.long),
            "owner": owner,
            "ground": [it.ground for it in items],
            "ids": [it.id for it in items],
            "texts": [it.text for it in items],
            "is_retrieval": torch.tensor([it.prefix == RETRIEVAL_PREFIX for it in items]),
        }
        return batch


class GSRDataModule:
    """Epoch-dependent training mix (see module doc) and a fixed validation set.

    A LightningDataModule subclass is created lazily (``as_lightning``) so this module
    imports without Lightning; the runner uses ``GSRDataModule(...).as_lightning()``.
    """

    def __init__(
        self,
        gsr,
        retrieval: Sequence[Seq2SeqItem],
        index_pool: Sequence[Seq2SeqItem],
        validation: Sequence[Seq2SeqItem],
        schedule: str = "joint",
        index_epochs: int = 0,
        index_ratio: float = 1.0,
        batch_size: int = 32,
        eval_batch_size: int = 64,
        seed: int = 0,
        max_targets: int | None = None,
        walk_pool: Sequence[Seq2SeqItem] = (),
        walk_ratio: float = 0.0,
        index_focus: Sequence[bool] | None = None,
        focus_share: float | None = None,
    ) -> None:
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
        self.walk_pool = list(walk_pool)  # multi-hop random-walk examples, outside the index phase
        self.walk_ratio = float(walk_ratio)
        # joint epochs: ``focus_share`` of the indexing sample from the pool items flagged in
        # ``index_focus`` (e.g. the relations of the KG the model will decode over), the rest from the others
        if focus_share is not None:
            if not 0.0 <= float(focus_share) <= 1.0:
                raise ValueError(f"gsr.index.kg_share must be in [0, 1], got {focus_share}")
            if index_focus is None or len(index_focus) != len(self.index_pool):
                raise ValueError("focus_share needs one index_focus flag per indexing example")
        self.focus_share = None if focus_share is None else float(focus_share)
        flags = list(index_focus) if index_focus is not None else [False] * len(self.index_pool)
        self.index_focus = [it for it, f in zip(self.index_pool, flags) if f]
        self.index_rest = [it for it, f in zip(self.index_pool, flags) if not f]
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
                items += self._index_sample(n, rng)
            if self.walk_pool and self.walk_ratio > 0:
                n = min(len(self.walk_pool), int(round(self.walk_ratio * len(self.retrieval))))
                items += rng.sample(self.walk_pool, n)
        rng.shuffle(items)
        return items

    def _index_sample(self, n: int, rng: random.Random) -> list[Seq2SeqItem]:
        """``n`` indexing examples: uniform over the pool, or ``focus_share`` of them from the focus
        items (the other part tops up whichever side runs short)."""
        if self.focus_share is None:
            return rng.sample(self.index_pool, n)
        k = min(len(self.index_focus), int(round(self.focus_share * n)))
        rest = min(len(self.index_rest), n - k)
        k = min(len(self.index_focus), n - rest)
        return rng.sample(self.index_focus, k) + rng.sample(self.index_rest, rest)

    def _cap(self, item: Seq2SeqItem, rng: random.Random) -> Seq2SeqItem:
        """At most ``max_targets`` chains per question, a fresh random subset every epoch."""
        if self.max_targets is None or len(item.targets) <= self.max_targets:
            return item
        return Seq2SeqItem(item.prefix, item.text, rng.sample(item.targets, self.max_targets), item.ground, item.id)

    def steps_per_epoch(self, epoch: int = 0) -> int:
        return max(1, -(-len(self.epoch_items(epoch)) // self.batch_size))

    def train_loader(self, epoch: int, skip_batches: int = 0, resume=None):
        """``resume``: a `gsr_train.datamodules.triple_datamodule.ResumeSkip` read when the first
        pass starts."""
        items = self.epoch_items(epoch)  # already shuffled per epoch; sharded by rank under DDP
        sampler = RankSampler(len(items), shuffle=False)
        sampler.skip = skip_batches * self.batch_size
        sampler.resume = resume
        return DataLoader(
            items,  # type: ignore[arg-type]  # a list is a map-style dataset; torch's stub asks for Dataset
            batch_size=self.batch_size,
            sampler=sampler,
            collate_fn=self.collate,
        )

    def rank_batches(self, epoch: int) -> int:
        """Training batches of ``epoch`` on this rank (under DDP each rank holds 1/W of the items)."""
        return max(1, -(-len(RankSampler(len(self.epoch_items(epoch)), shuffle=False)) // self.batch_size))

    def total_steps(self, max_epochs: int, accumulate: int = 1, world: int = 1) -> int:
        """Optimiser steps of a whole run on each rank (DDP: every rank holds 1/``world`` of an
        epoch's items; ``accumulate`` batches per step), what the learning-rate schedule spans."""
        return sum(
            math.ceil(
                -(
                    -len(RankSampler(len(self.epoch_items(e)), shuffle=False, num_replicas=world, rank=0))
                    // self.batch_size
                )
                / accumulate
            )
            for e in range(max_epochs)
        )

    def val_loader(self):

        return DataLoader(self.validation, batch_size=self.eval_batch_size, shuffle=False, collate_fn=self.collate)

    def as_lightning(self):
        return make_lightning_datamodule(self)


def _lightning_class():

    class LightningGSRData(pl.LightningDataModule):
        def __init__(self, data: GSRDataModule) -> None:
            super().__init__()
            self.gsr_data = data

        def train_dataloader(self):

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
    """The Lightning side of `GSRDataModule`.

    Under DDP the training items of an epoch are sharded by rank (rank ``r`` takes items
    ``r, r + W, ...`` of the epoch's order), so W ranks with batch B see the same items per
    optimiser step as one process with batch ``W * B``; validation is sharded by Lightning
    and merged by `gsr_train.models.gsr.module.GSRModule`.
    """
    return sys.modules[__name__].LightningGSRData(owner)
