"""LightningDataModule for triple scorers (SubgraphRAG): whole question graphs per batch.

A batch is ``graphs_per_batch`` question graphs (the paper trains on one graph per step;
more make each step amortise entity projections over graphs that share entities) in the
layout of `gsr_train.features.triple_batch.TripleBatch`. Structural features
(DDE) are parameter-free, so they are computed once per split, for all graphs at once,
in `TripleDataModule.setup` (and stored as distinct rows: DDE vectors repeat).

Training graphs that cannot teach anything are skipped and counted (``skipped``): graphs
without edges and graphs without a positive: a triple on a shortest path between a topic and
an answer entity for triple scorers (``targets="triples"``), an answer entity in the graph for
node scorers (``targets="nodes"``). Validation keeps every question so its recall is comparable.

Shuffling is a pure function of ``(seed, epoch)`` (`EpochShuffleSampler`, whose
epoch Lightning sets), so a run resumed from ``last.ckpt`` sees the same order as an
uninterrupted one. Under DDP the same order is sharded by rank (`RankSampler`):
W processes with ``graphs_per_batch`` B take the same graphs per step as one with W * B.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import pytorch_lightning as pl
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from gsr_train.arrays import segment_sum
from gsr_train.features.structure import NodeFeatures, node_features
from gsr_train.features.triple_batch import TripleBatch, make_batch
from gsr_train.kg.index import KGIndex, SplitGraphs
from gsr_train.kg.paths import Supervision

log = logging.getLogger(__name__)


def _world() -> tuple[int, int]:
    """``(num_replicas, rank)`` of the running process group, ``(1, 0)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class RankSampler(DistributedSampler):
    """A fixed order of ``range(n)`` (identity, or a permutation of ``(seed, epoch)``) sharded by rank.

    Rank ``r`` of ``W`` takes positions ``r, r + W, ...`` of the order (padded with its first
    items to a multiple of W, like `DistributedSampler`), so one optimiser step of W
    ranks with batch B covers the same items as one step of a single process with batch
    ``W * B``. Being a ``DistributedSampler``, Lightning uses it as is instead of wrapping it
    in its own (which would shuffle again); in a single process it is the plain order.
    """

    def __init__(
        self, n: int, seed: int = 0, shuffle: bool = True, num_replicas: int | None = None, rank: int | None = None
    ) -> None:
        world, me = _world()
        super().__init__(
            range(int(n)),  # type: ignore[arg-type]  # a range is a map-style dataset; torch's stub asks for Dataset
            num_replicas=num_replicas or world,
            rank=me if rank is None else rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=False,
        )
        self.n = int(n)
        self.skip = 0  # items of this rank's shard to leave out of the next pass only (mid-epoch resume)
        self.resume: Callable[[], int] | None = None  # adds to ``skip`` when the first pass starts

    def order(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.n))
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return torch.randperm(self.n, generator=gen).tolist()

    def __iter__(self) -> Iterator[int]:
        order = self.order()
        if self.num_replicas > 1 and order:
            pad = self.total_size - len(order)
            order = order + (order * (pad // len(order) + 1))[:pad]
        mine = order[self.rank : self.total_size : self.num_replicas]
        skip, self.skip = self.skip, 0
        if self.resume is not None:
            resume, self.resume = self.resume, None
            skip += int(resume())
        return iter(mine[skip:])


class FixedBatches:
    """``batches_per_epoch`` of a loader whose epochs all have the same length."""

    def __init__(self, value: int) -> None:
        self.value = int(value)

    def __call__(self, _epoch: int) -> int:
        return self.value


def resume_offset(trainer, batches_per_epoch: Callable[[int], int]) -> int:
    """Batches of the current epoch already trained when ``fit`` restarts from a mid-epoch checkpoint.

    Lightning restores the step counters but restarts a plain DataLoader from its first batch;
    our orders are pure functions of ``(seed, epoch)``, so the loader skips the batches the
    restored ``global_step`` says were done (0 at an epoch boundary and in a fresh run).
    ``batches_per_epoch(e)``: training batches of epoch ``e`` on this rank.
    """
    if trainer is None:
        return 0
    epoch, accum = int(trainer.current_epoch), max(int(trainer.accumulate_grad_batches or 1), 1)
    before = sum(-(-batches_per_epoch(e) // accum) for e in range(epoch))
    done = (int(trainer.global_step) - before) * accum
    return done if 0 < done < batches_per_epoch(epoch) else 0


class ResumeSkip:
    """``RankSampler.resume``: items to skip, counted when the first pass *starts*.

    Lightning may build the training loader before it restores the step counters from the
    checkpoint (``configure_optimizers`` asking for ``trainer.estimated_stepping_batches``
    loads it early), so the offset is read from the trainer at iteration time, not when the
    loader is made.
    """

    def __init__(self, trainer, batches_per_epoch: Callable[[int], int], batch_size: int) -> None:
        self.trainer, self.batches_per_epoch, self.batch_size = trainer, batches_per_epoch, int(batch_size)

    def __call__(self) -> int:
        done = resume_offset(self.trainer, self.batches_per_epoch)
        if done:
            log.info("resuming mid-epoch: skipping the first %d batches of epoch %d", done, self.trainer.current_epoch)
        return done * self.batch_size


class EpochShuffleSampler(RankSampler):
    """A permutation of ``range(n)`` that depends only on ``(seed, epoch)`` (sharded under DDP)."""


class GraphCollate:
    """Turns a list of question positions into one `TripleBatch` of a split."""

    def __init__(
        self,
        split: SplitGraphs,
        features: NodeFeatures,
        question_emb: torch.Tensor,
        entity_emb: torch.Tensor,
        entity_has_text: torch.Tensor,
        relation_emb: torch.Tensor,
        labels: torch.Tensor | None = None,
    ) -> None:
        self.split, self.features, self.labels = split, features, labels
        self.question_emb, self.entity_emb = question_emb, entity_emb
        self.entity_has_text, self.relation_emb = entity_has_text, relation_emb

    def __call__(self, questions: Sequence[int]) -> TripleBatch:
        return make_batch(
            self.split,
            list(questions),
            self.features,
            self.question_emb,
            self.entity_emb,
            self.entity_has_text,
            self.relation_emb,
            self.labels,
        )


TARGETS = ("triples", "nodes")


def trainable_questions(
    split: SplitGraphs, labels: torch.Tensor, targets: str = "triples"
) -> tuple[torch.Tensor, dict[str, int]]:
    """Positions of questions with at least one edge and one positive (a labelled triple, or for
    ``targets="nodes"`` an answer entity in the graph), and the skip counts."""
    if targets not in TARGETS:
        raise ValueError(f"targets must be one of {TARGETS}, got {targets!r}")
    edges = split.num_edges
    if targets == "nodes":
        positives = torch.from_numpy(segment_sum(split.answer_mask.numpy().view(np.uint8), split.ent_ptr.numpy()))
    else:
        positives = torch.from_numpy(segment_sum(labels.numpy(), split.edge_ptr.numpy()))
    no_edges = edges == 0
    no_positive = ~no_edges & (positives == 0)
    keep = (~no_edges & ~no_positive).nonzero().flatten()
    return keep, {"no_edges": int(no_edges.sum()), "no_positive": int(no_positive.sum()), "kept": int(keep.numel())}


class TripleDataModule(pl.LightningDataModule):
    """Train / validation batches of whole graphs with shortest-path triple labels.

    ``embeddings`` is a `gsr_train.text.embeddings.KGEmbeddings` (memory-mapped
    tables; batches gather only the rows they use); ``supervision`` maps split names to
    `gsr_train.kg.paths.Supervision`.
    """

    def __init__(
        self,
        index: KGIndex,
        embeddings,
        supervision: Mapping[str, Supervision],
        structure: str = "dde",
        dde_forward: int = 2,
        dde_reverse: int = 2,
        train_split: str = "train",
        val_split: str | None = "validation",
        graphs_per_batch: int = 1,
        eval_graphs_per_batch: int = 64,
        seed: int = 0,
        num_workers: int = 0,
        targets: str = "triples",
    ) -> None:
        super().__init__()
        if graphs_per_batch < 1 or eval_graphs_per_batch < 1:
            raise ValueError(
                f"graphs_per_batch and eval_graphs_per_batch must be >= 1 "
                f"(got {graphs_per_batch}, {eval_graphs_per_batch})"
            )
        for split in [train_split, val_split]:
            if split is not None and split not in supervision:
                raise KeyError(f"no supervision for split {split!r} (have {sorted(supervision)})")
            if split is not None:
                index[split]  # clear KeyError for a split the index lacks
        self.index, self.embeddings, self.supervision = index, embeddings, supervision
        self.structure, self.dde_forward, self.dde_reverse = structure, dde_forward, dde_reverse
        self.train_split, self.val_split = train_split, val_split
        self.graphs_per_batch, self.eval_graphs_per_batch = int(graphs_per_batch), int(eval_graphs_per_batch)
        self.seed, self.num_workers, self.targets = int(seed), int(num_workers), str(targets)
        self.features: dict[str, NodeFeatures] = {}
        self.train_questions: torch.Tensor | None = None
        self.skipped: dict[str, int] = {}

    # ---------------------------------------------------------------- state
    def split_features(self, split: str) -> NodeFeatures:
        if split not in self.features:
            self.features[split] = node_features(self.index[split], self.structure, self.dde_forward, self.dde_reverse)
        return self.features[split]

    def labels(self, split: str) -> torch.Tensor:
        return self.supervision[split].triple_label

    def validation_graphs(self) -> tuple[SplitGraphs, torch.Tensor]:
        """The validation split's graphs and triple labels (what the model's validation recall needs)."""
        if self.val_split is None:
            raise RuntimeError("this datamodule has no validation split")
        return self.index[self.val_split], self.labels(self.val_split)

    def setup(self, stage: str | None = None) -> None:
        if self.train_questions is None:
            graphs = self.index[self.train_split]
            keep, self.skipped = trainable_questions(graphs, self.labels(self.train_split), self.targets)
            positive = "an answer entity in the graph" if self.targets == "nodes" else "a positive triple"
            if keep.numel() == 0:
                raise ValueError(f"split {self.train_split!r} has no question with an edge and {positive}")
            self.train_questions = keep
            if self.skipped["no_edges"] or self.skipped["no_positive"]:
                log.info(
                    "training on %d graphs of %r; skipped %d without edges and %d without %s",
                    keep.numel(),
                    self.train_split,
                    self.skipped["no_edges"],
                    self.skipped["no_positive"],
                    positive,
                )
        for split in (self.train_split, self.val_split):
            if split is not None:
                self.split_features(split)

    def collate(self, split: str, with_labels: bool = True) -> GraphCollate:
        emb = self.embeddings
        return GraphCollate(
            self.index[split],
            self.split_features(split),
            emb.question[split],
            emb.entity,
            emb.entity_has_text,
            emb.relation,
            self.labels(split) if with_labels else None,
        )

    # ---------------------------------------------------------------- loaders
    def train_dataloader(self) -> DataLoader:
        self.setup("fit")
        assert self.train_questions is not None  # set by setup
        questions = self.train_questions.tolist()
        sampler = EpochShuffleSampler(len(questions), self.seed)
        batches = -(-len(sampler) // self.graphs_per_batch)
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            sampler.set_epoch(int(trainer.current_epoch))
            sampler.resume = ResumeSkip(trainer, FixedBatches(batches), self.graphs_per_batch)
        return DataLoader(
            questions,  # type: ignore[arg-type]  # a list is a map-style dataset; torch's stub asks for Dataset
            batch_size=self.graphs_per_batch,
            sampler=sampler,
            collate_fn=self.collate(self.train_split),
            num_workers=self.num_workers,
        )

    def eval_dataloader(self, split: str, with_labels: bool = False) -> DataLoader:
        """All questions of ``split`` in order (nothing skipped)."""
        return DataLoader(
            list(range(len(self.index[split]))),  # type: ignore[arg-type]  # a list is a map-style dataset
            batch_size=self.eval_graphs_per_batch,
            shuffle=False,
            collate_fn=self.collate(split, with_labels),
            num_workers=self.num_workers,
        )

    def val_dataloader(self) -> DataLoader | list:
        if self.val_split is None:
            return []
        return self.eval_dataloader(self.val_split)

    def transfer_batch_to_device(self, batch: TripleBatch, device: torch.device, dataloader_idx: int) -> TripleBatch:
        if device.type == "cpu":
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)
