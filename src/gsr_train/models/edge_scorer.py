"""The one interface of a trainable triple scorer: subclass `EdgeScorerModule`, write ``forward``.

Like PyTorch Geometric's ``MessagePassing``, the base class holds everything a scorer of
question graphs shares, so a new method is its model and nothing else:

* ``forward(batch: TripleBatch) -> FloatTensor[T]``: one logit per triple of the batch (the
  subclass's own code). A batch carries several whole question graphs: the question
  embeddings, the distinct entity / relation embeddings with index tensors into them, the
  node features the class asks for (``structure``: ``"dde"``, ``"topic"`` or ``"none"``) and
  the shortest-path triple labels (`gsr_train.features.triple_batch`).
* training: BCE over every triple (optional ``pos_weight``) plus an optional listwise term;
  each step reseeds the RNG from ``(seed, global_step)`` so a resumed run ends where an
  uninterrupted one does;
* validation: every triple of the validation split is scored, per-rank scores are merged
  under DDP, and ``val/sp_recall@K`` (the checkpoint / early-stopping monitor) and
  ``val/answer_recall@K`` are logged;
* an Adam optimiser at ``lr`` (override ``configure_optimizers`` for another).

The training recipe (``val_k``, ``seed``, the loss terms) is set by the runner through
`EdgeScorerModule.train_with`. Checkpoints carry the class path and the constructor's
arguments (`CHECKPOINT_KEY`), so `load_edge_scorer` rebuilds any subclass without
the run's config.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import hydra.utils
import pytorch_lightning as pl
import torch
import torch.distributed as dist
import torch.nn.functional as F

from gsr_train.arrays import scatter
from gsr_train.config import defaults_of
from gsr_train.eval.retrieval import retrieval_metrics
from gsr_train.features.triple_batch import TripleBatch
from gsr_train.kg.index import SplitGraphs
from gsr_train.models.edge_options import EdgeLoss

# a checkpoint's {"class": "module:QualName", "init": constructor kwargs, "meta": what it was trained on, "val_k"}
CHECKPOINT_KEY = "edge_scorer"


DEFAULT_LOSS = defaults_of(EdgeLoss)


def listwise_loss(
    logits: torch.Tensor, labels: torch.Tensor, question: torch.Tensor, num_questions: int, smoothing: float = 0.0
) -> torch.Tensor:
    """Mean over graphs with a positive of ``-mean_{i in pos} log softmax_graph(logits)_i``; with
    ``smoothing`` eps, the target distribution is ``(1 - eps)`` uniform over the positives plus
    ``eps`` uniform over all of the graph's items (label smoothing of the answer distribution)."""
    top = scatter(logits.detach(), question, dim=0, dim_size=num_questions, reduce="max")
    shifted = logits - top[question]
    lse = torch.log(scatter(shifted.exp(), question, dim=0, dim_size=num_questions, reduce="sum").clamp_min(1e-30))
    log_p = shifted - lse[question]
    pos = labels > 0
    n_pos = scatter(pos.float(), question, dim=0, dim_size=num_questions, reduce="sum")
    per_q = scatter(
        torch.where(pos, -log_p, torch.zeros_like(log_p)), question, dim=0, dim_size=num_questions, reduce="sum"
    )
    has = n_pos > 0
    if not bool(has.any()):
        return logits.sum() * 0.0
    per_q = per_q[has] / n_pos[has]
    if smoothing:
        n_all = scatter(torch.ones_like(log_p), question, dim=0, dim_size=num_questions, reduce="sum")
        every = scatter(-log_p, question, dim=0, dim_size=num_questions, reduce="sum")[has] / n_all[has]
        per_q = (1.0 - smoothing) * per_q + smoothing * every
    return per_q.mean()


class ValidationSource(Protocol):
    """Where validation recall comes from: the split's graphs and its triple labels."""

    def validation_graphs(self) -> tuple[SplitGraphs, torch.Tensor]: ...


def seed_step(seed: int, device: torch.device) -> None:
    """Seed the generators a training step on ``device`` draws from, as ``torch.manual_seed`` does.

    ``torch.manual_seed`` also queues a seeding of CUDA, XPU and MTIA for when each initialises, and
    formats the Python stack for each: 1.5% of the CPU quickstart's time, and nothing on a CPU run reads them."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed_all(seed)  # CUDA is initialised: the model is on it
    elif device.type != "cpu":
        torch.manual_seed(seed)


@dataclass
class NodeCandidates:
    """A node scorer's answer candidates in a batch: ``nodes [M]`` (node positions in the batch),
    ``prob [M]`` and, optionally, ``paths [M, H]``: the batch triples of one path from a topic
    entity to each candidate, from the topic outwards, ``-1`` padded (an empty row: no path)."""

    nodes: torch.Tensor
    prob: torch.Tensor
    paths: torch.Tensor | None = None


class EdgeScorerModule(pl.LightningModule):
    """Base of every trainable triple scorer; subclasses implement `forward`."""

    structure: ClassVar[str] = "none"  # node features the batches carry: "dde" | "topic" | "none"
    dde_rounds: ClassVar[tuple[int, int]] = (2, 2)  # (forward, reverse) rounds when structure is "dde"
    targets: ClassVar[str] = "triples"  # what it learns from: "triples" (shortest-path labels) | "nodes" (answers)
    lr: float = 1e-3
    _init_arguments: dict[str, Any] | None = None  # set by create()

    def __init__(self) -> None:
        super().__init__()
        self.val_k = 100
        self.seed = 0
        self.loss_cfg: dict[str, Any] = dict(DEFAULT_LOSS)
        self.meta: dict[str, Any] = {}
        self._val_scores: torch.Tensor | None = None
        self._val_hits: torch.Tensor | None = None  # node scorers: 1 where a question's first answer is right
        self._validation_source: ValidationSource | None = None

    def train_with(
        self, val_k: int, seed: int, loss: Mapping[str, Any] | None = None, meta: Mapping[str, Any] | None = None
    ) -> EdgeScorerModule:
        """The recipe's part the module needs: the monitored K, the seed, the loss terms, and what it
        is trained on (``meta``: encoder, embedding size, vocabulary hashes; saved in checkpoints)."""
        self.val_k, self.seed = int(val_k), int(seed)
        self.loss_cfg = {**DEFAULT_LOSS, **dict(loss or {})}
        self.meta = dict(meta or {})
        return self

    def forward(self, batch: TripleBatch) -> torch.Tensor:  # pragma: no cover - the subclass's job
        raise NotImplementedError(f"{type(self).__name__}.forward(batch) must return one logit per triple")

    def score_batch(self, batch: TripleBatch, n: int) -> tuple[torch.Tensor, NodeCandidates | None]:
        """Serving: the batch's triple scores and, for a node scorer, its answer candidates (the top
        ``n`` per question, grouped by question and best first; None for triple scorers); one
        forward pass for both."""
        return self(batch), None

    def training_targets(self, batch: TripleBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logits, labels, group)`` the loss is taken on: the triples and their shortest-path
        labels, grouped by question (a node scorer returns its nodes and answer flags instead)."""
        if batch.labels is None:
            raise ValueError("training batches need labels")
        return self.training_logits(batch), batch.labels, batch.triple_question()

    def training_logits(self, batch: TripleBatch) -> torch.Tensor:
        """The logits the loss is taken on (``forward``; a subclass may train through another path)."""
        return self(batch)

    # ---------------------------------------------------------------- training
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        seed_step((self.seed * 1_000_003 + self.global_step) % (1 << 63), self.device)

    def compute_loss(self, logits: torch.Tensor, batch: TripleBatch) -> torch.Tensor:
        if batch.labels is None:
            raise ValueError("the loss needs batches with labels")
        return self.loss_on(logits, batch.labels, batch.triple_question(), batch.num_questions)

    def loss_on(self, logits: torch.Tensor, labels: torch.Tensor, group: torch.Tensor, num_groups: int) -> torch.Tensor:
        """BCE (``pos_weight`` on positives) plus ``listwise`` times each group's softmax cross-entropy
        (its target smoothed by ``label_smoothing``)."""
        pw = self.loss_cfg.get("pos_weight")
        pos_weight = None if pw in (None, 0, 1) else torch.tensor(float(pw), device=logits.device)
        loss = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), pos_weight=pos_weight)
        weight = float(self.loss_cfg.get("listwise") or 0.0)
        if weight:
            smoothing = float(self.loss_cfg.get("label_smoothing") or 0.0)
            loss = loss + weight * listwise_loss(logits, labels.to(logits.dtype), group, num_groups, smoothing)
        return loss

    def training_step(self, batch: TripleBatch, batch_idx: int) -> torch.Tensor:
        logits, labels, group = self.training_targets(batch)
        if logits.shape != labels.shape:
            raise ValueError(
                f"{type(self).__name__} returned {tuple(logits.shape)} logits for {tuple(labels.shape)} labels"
            )
        loss = self.loss_on(logits, labels, group, batch.num_questions)
        self.log("train/loss", loss, batch_size=batch.num_questions, prog_bar=True)
        return loss

    # ---------------------------------------------------------------- validation
    def validate_on(self, source: ValidationSource | None) -> EdgeScorerModule:
        """The graphs and labels validation recall is computed on, handed over by the recipe
        (the module does not know the datamodule: any object with ``validation_graphs()``)."""
        self._validation_source = source
        return self

    def _val_data(self) -> tuple[SplitGraphs, torch.Tensor]:
        if self._validation_source is None:
            raise RuntimeError("validation needs its graphs: call module.validate_on(<datamodule>) in the recipe")
        return self._validation_source.validation_graphs()

    def on_validation_epoch_start(self) -> None:
        split, _ = self._val_data()
        self._val_scores = torch.full((int(split.edge_ptr[-1]),), -math.inf)
        self._val_hits = torch.zeros(len(split)) if self.targets == "nodes" else None

    def _epoch_val_scores(self) -> torch.Tensor:
        """The validation epoch's score table (set by `on_validation_epoch_start`)."""
        if self._val_scores is None:
            raise RuntimeError("no validation epoch is running")
        return self._val_scores

    def validation_step(self, batch: TripleBatch, batch_idx: int) -> None:
        if self._val_hits is None or batch.node_answer is None:
            self._epoch_val_scores()[batch.edge_ids.cpu()] = self(batch).float().cpu()
            return
        scores, found = self.score_batch(batch, 1)  # a node scorer: its first answer, right or not
        self._epoch_val_scores()[batch.edge_ids.cpu()] = scores.float().cpu()
        if found is not None and found.nodes.numel():
            owner = batch.questions.cpu()[batch.node_q[found.nodes].cpu()]  # CPU table, batch on any device
            self._val_hits[owner] = batch.node_answer[found.nodes].float().cpu()

    def _merge_val_scores(self) -> None:
        """Max all-reduce of the per-rank validation scores (no-op in a single process)."""
        if self.trainer.world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
            return
        scores = self._epoch_val_scores().to(self.device)
        dist.all_reduce(scores, op=dist.ReduceOp.MAX)
        self._val_scores = scores.cpu()
        if self._val_hits is not None:
            hits = self._val_hits.to(self.device)
            dist.all_reduce(hits, op=dist.ReduceOp.MAX)
            self._val_hits = hits.cpu()

    def on_validation_epoch_end(self) -> None:

        self._merge_val_scores()
        split, labels = self._val_data()
        report = retrieval_metrics(split, self._epoch_val_scores(), [self.val_k], sp_label=labels)
        for metric in ("sp_recall", "answer_recall"):
            value = report.overall[metric][self.val_k]
            if value is not None:
                # identical on every rank after the merge; sync_dist keeps Lightning's reduction explicit
                self.log(f"val/{metric}@{self.val_k}", float(value), prog_bar=metric == "sp_recall", sync_dist=True)
        if self._val_hits is not None:  # a node scorer: how often its first answer is right
            self.log("val/hit@1", float(self._val_hits.mean()), prog_bar=True, sync_dist=True)
        self._val_scores = self._val_hits = None

    # ---------------------------------------------------------------- optimiser, checkpoints
    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=float(self.lr))

    @classmethod
    def create(cls, **kwargs: Any) -> EdgeScorerModule:
        """``cls(**kwargs)``, remembering the arguments for checkpoints (no ``save_hyperparameters`` needed)."""
        module = cls(**kwargs)
        module._init_arguments = dict(kwargs)
        return module

    def init_arguments(self) -> dict[str, Any]:
        """The constructor's arguments, to rebuild the module from a checkpoint: those given to
        `create`, else those ``save_hyperparameters`` recorded."""
        return dict(self._init_arguments) if self._init_arguments is not None else dict(self.hparams)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        cls = type(self)
        checkpoint[CHECKPOINT_KEY] = {
            "class": f"{cls.__module__}:{cls.__qualname__}",
            "init": self.init_arguments(),
            "meta": self.meta,
            "val_k": self.val_k,
        }


class CheckpointError(ValueError):
    """A checkpoint that is not one of a trainable triple scorer, or whose class cannot be imported."""


def load_edge_scorer(path: str | Path, map_location: str | torch.device = "cpu") -> EdgeScorerModule:
    """Rebuild the scorer saved in ``path`` (any `EdgeScorerModule` subclass), in eval mode."""
    try:
        checkpoint = torch.load(str(path), map_location=map_location, weights_only=False)
    except (OSError, RuntimeError, EOFError) as e:
        raise CheckpointError(f"{path}: cannot read the checkpoint ({type(e).__name__}: {e})") from None
    info = checkpoint.get(CHECKPOINT_KEY) if isinstance(checkpoint, dict) else None
    if not isinstance(info, dict) or "class" not in info:
        raise CheckpointError(f"{path}: not a checkpoint of a trainable triple scorer (no {CHECKPOINT_KEY!r} entry)")
    try:  # "module:QualName", the class's import path (Hydra resolves nested names too)
        cls: Any = hydra.utils.get_object(str(info["class"]).replace(":", "."))
    except Exception as e:  # noqa: BLE001 - a missing or moved package: named below
        raise CheckpointError(
            f"{path}: its scorer class {info['class']} cannot be imported ({e}); install the package that defines it"
        ) from None
    module = cls(**dict(info.get("init") or {}))
    module.load_state_dict(checkpoint["state_dict"])
    module.meta = dict(info.get("meta") or {})
    module.val_k = int(info.get("val_k") or module.val_k)
    return module.to(map_location).eval()  # built on the CPU: the weights follow map_location
