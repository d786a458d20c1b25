"""SubgraphRAG inference: score every triple of a split with a trained scorer, keep the top K.

Scoring uses the precomputed-projection path (`TripleScorer.precompute` /
`TripleScorer.forward_projected`): the first-layer projections of every entity and
relation are computed once per trained model, so per question only the DDE, the
question / pair / node terms and, per triple, three gathers + ReLU + output layer remain.
Questions are scored many graphs at a time; the DDE of the whole split is one batched
scatter pass. Results go to the project's one result format
(`gsr_train.eval.results.write_results`), and the scores (``FloatTensor[sum E]``)
are returned for the metrics.

When the projection table of the whole entity vocabulary would exceed
``max_projection_bytes`` (256 MB by default: a full WebQSP vocabulary at hidden 256 is
1.8 GB, CWQ's several times that), only the entities of the split being scored are projected.

On CPU, models of the paper's MLP shape are served by compiled kernels
(`gsr_train.models.subgraphrag.serving.CompiledQuestionScorer`: one question at a
time, a fraction of a millisecond each; a split is spread over ``workers`` threads, with
the same numbers as one thread); ``serving="torch"`` forces the batched torch path (the
only one on CUDA).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gsr_train.eval.results import write_results
from gsr_train.features.structure import NodeFeatures, graph_structure, node_features
from gsr_train.features.triple_batch import make_batch, question_batch
from gsr_train.kg.index import KGIndex, QuestionGraph, SplitGraphs
from gsr_train.models.subgraphrag.module import SubgraphRAGModule
from gsr_train.models.subgraphrag.perf import keep_freed_memory
from gsr_train.models.subgraphrag.scorer import Projections, TripleScorer
from gsr_train.models.subgraphrag.serving import CompiledQuestionScorer
from gsr_train.progress import batches

log = logging.getLogger(__name__)

DEFAULT_MAX_PROJECTION_BYTES = 256 << 20
SERVING_MODES = ("auto", "compiled", "torch")


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def load_scorer(checkpoint: str | Path, map_location: str | torch.device = "cpu") -> tuple[TripleScorer, dict]:
    """The trained scorer of a Lightning checkpoint and the checkpoint's hyperparameters."""
    path = Path(checkpoint)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    # the classmethod itself: Lightning's wrapper walks inspect.stack() (reading the source of every frame)
    # to refuse a call on an instance, 0.3 s of every load in a process with torch and Lightning imported
    load = SubgraphRAGModule.load_from_checkpoint
    unwrapped = getattr(load, "__func__", None)
    options: dict[str, Any] = {"map_location": map_location, "weights_only": False}
    module = unwrapped(SubgraphRAGModule, path, **options) if unwrapped else load(path, **options)
    module.eval()
    return module.scorer, dict(module.hparams)


def check_compatible(hparams: Mapping[str, Any], emb) -> None:
    """Fail clearly when a checkpoint meets embeddings of another size or encoder."""
    dim = int(hparams.get("dim", emb.dim))
    if dim != emb.dim:
        raise ValueError(f"checkpoint expects {dim}-d embeddings, the embeddings are {emb.dim}-d ({emb.encoder_name})")
    meta = hparams.get("meta") or {}
    trained = meta.get("encoder_name")
    if trained and trained != emb.encoder_name:
        raise ValueError(
            f"checkpoint was trained with encoder {trained!r}, the embeddings come from {emb.encoder_name!r}"
        )


class SubgraphRAGRetriever:
    """Scores splits with a trained `TripleScorer` (eval mode, no gradients)."""

    hparams: dict[str, Any]  # the checkpoint's hyper-parameters: set by from_checkpoint

    def __init__(
        self,
        scorer: TripleScorer,
        device: str | torch.device = "cpu",
        max_projection_bytes: int = DEFAULT_MAX_PROJECTION_BYTES,
        serving: str = "auto",
        workers: int | None = None,
    ) -> None:
        if serving not in SERVING_MODES:
            raise ValueError(f"serving must be one of {SERVING_MODES}, got {serving!r}")
        keep_freed_memory()  # scoring allocates MB-sized temporaries per call: reuse them, do not page-fault
        self.scorer = scorer.eval().to(device)
        self.device = torch.device(device)
        self.max_projection_bytes = int(max_projection_bytes)
        self.serving = serving
        self.workers = int(workers) if workers else usable_cores()  # threads for compiled split scoring
        if serving == "compiled":
            reason = "it runs on CUDA" if self.device.type != "cpu" else CompiledQuestionScorer.unsupported(self.scorer)
            if reason:
                raise ValueError(f"serving='compiled' is not possible for this retriever: {reason}")
        self._proj: Projections | None = None
        self._proj_key: tuple | None = None
        self._compiled: CompiledQuestionScorer | None = None
        self._compiled_for: Projections | None = None
        self.timings: dict[str, float] = {}

    @property
    def uses_compiled(self) -> bool:
        """Whether scoring goes through the compiled CPU kernels (see the module docstring)."""
        return (
            self.serving != "torch"
            and self.device.type == "cpu"
            and not CompiledQuestionScorer.unsupported(self.scorer)
        )

    def compiled(self, emb, split: SplitGraphs | None = None) -> CompiledQuestionScorer:
        """The compiled scorer over the current projections (built once per projection table)."""
        return self._compiled_over(self.projections(emb, split), emb)

    def _compiled_over(self, proj: Projections, emb) -> CompiledQuestionScorer:
        if self._compiled is None or self._compiled_for is not proj:
            self._compiled = CompiledQuestionScorer(self.scorer, proj, emb.relation)
            self._compiled_for = proj
        return self._compiled

    @classmethod
    def from_checkpoint(
        cls, checkpoint: str | Path, device: str | torch.device = "cpu", **kwargs
    ) -> SubgraphRAGRetriever:
        scorer, hparams = load_scorer(checkpoint, map_location=device)
        retriever = cls(scorer, device, **kwargs)
        retriever.hparams = hparams
        return retriever

    # ---------------------------------------------------------------- projections
    def _row_bytes(self, emb) -> int:
        """Bytes of one entity's projection row (plus its unit-length copy for cosine features)."""
        return 4 * (2 * self.scorer.config.hidden + (emb.dim if self.scorer.has("cos_h") else 0))

    def fits_whole(self, emb) -> bool:
        """Whether the projections of the whole entity vocabulary fit ``max_projection_bytes``."""
        return emb.entity.shape[0] * self._row_bytes(emb) <= self.max_projection_bytes

    def projections(self, emb, split: SplitGraphs | None = None) -> Projections:
        """Projections of all entities (kept), or only of ``split``'s entities when the whole
        table would exceed ``max_projection_bytes``."""
        whole = self.fits_whole(emb) or split is None
        key = (id(emb.entity), id(emb.relation)) if whole else (id(emb.entity), id(split))
        if self._proj is None or self._proj_key != key:
            t0 = time.perf_counter()
            self._proj = self.scorer.precompute(
                emb.entity, emb.entity_has_text, emb.relation, None if whole or split is None else split.entity_ids
            )
            self._proj_key = key
            self.timings["precompute_s"] = time.perf_counter() - t0
            log.log(
                logging.INFO if whole else logging.DEBUG,  # per-run tables: summed up by score_split
                "projected %d entities and %d relations in %.2fs",
                self._proj.ent.shape[0] - 1,
                self._proj.rel.shape[0],
                self.timings["precompute_s"],
            )
        return self._proj

    def clear_projections(self) -> None:
        """Forget the cached projection table: the next scoring projects ``emb`` again (a caller that
        scores each question with a table of its own entities, whose tensors may reuse freed ids)."""
        self._proj = self._proj_key = None
        self._compiled = self._compiled_for = None

    def parts(self, emb, split: SplitGraphs) -> list[tuple[int, int]]:
        """Question runs scored with one projection table each: the whole split when the
        vocabulary's table fits the budget, else runs whose local entities (an upper bound
        on their distinct ones) fit it, so memory stays bounded on CWQ-sized splits."""
        if self.fits_whole(emb) or not len(split):
            return [(0, len(split))]
        max_nodes = max(self.max_projection_bytes // self._row_bytes(emb), 1)
        ptr = split.ent_ptr.numpy()
        bounds, q0 = [], 0
        while q0 < len(split):
            q1 = int(np.searchsorted(ptr, ptr[q0] + max_nodes, side="right")) - 1
            q1 = min(max(q1, q0 + 1), len(split))
            bounds.append((q0, q1))
            q0 = q1
        return bounds

    # ---------------------------------------------------------------- scoring
    @torch.no_grad()
    def score_split(
        self,
        split: SplitGraphs,
        question_emb: torch.Tensor,
        emb,
        graphs_per_batch: int = 128,
        features: NodeFeatures | None = None,
    ) -> torch.Tensor:
        """``FloatTensor[sum E]`` scores (logits) of every triple of ``split`` (CPU).

        ``features``: the split's structural features when the caller has them (torch path).
        """
        if question_emb.shape[0] != len(split):
            raise ValueError(f"question_emb has {question_emb.shape[0]} rows, the split has {len(split)} questions")
        scores = torch.empty(split.total_edges)
        bounds = self.parts(emb, split)
        timings = {"precompute_s": 0.0, "features_s": 0.0, "scoring_s": 0.0}
        for q0, q1 in bounds:
            part = split if len(bounds) == 1 else split.slice(q0, q1)
            e0, e1 = int(split.edge_ptr[q0]), int(split.edge_ptr[q1])
            t0 = time.perf_counter()
            proj = self.projections(emb, part)
            timings["precompute_s"] += time.perf_counter() - t0
            part_features = features if len(bounds) == 1 else None
            self._score_part(
                part, question_emb[q0:q1], emb, proj, graphs_per_batch, part_features, scores[e0:e1], timings
            )
        if len(bounds) > 1:
            # a run's table is of no use to the next call
            self._proj = self._proj_key = self._compiled = self._compiled_for = None
            log.info(
                "scored %d questions in %d runs of bounded projection tables (%.2fs projecting)",
                len(split),
                len(bounds),
                timings["precompute_s"],
            )
        self.timings.update(timings)
        return scores

    def _score_part(
        self,
        split: SplitGraphs,
        question_emb: torch.Tensor,
        emb,
        proj: Projections,
        graphs_per_batch: int,
        features: NodeFeatures | None,
        out: torch.Tensor,
        timings: dict[str, float],
    ) -> None:
        if self.uses_compiled:  # one question at a time; DDE inside the kernels (``features`` not needed)
            compiled = self._compiled_over(proj, emb)
            t0 = time.perf_counter()
            for s, e in batches(len(split), graphs_per_batch, None, "SubgraphRAG: scoring", threshold=16):
                compiled.score_split(split, question_emb, out, range(s, e), workers=self.workers)
            timings["scoring_s"] += time.perf_counter() - t0
            return
        cfg = self.scorer.config
        t0 = time.perf_counter()
        if features is None:
            features = node_features(split, cfg.structure, cfg.dde_forward, cfg.dde_reverse)
        t1 = time.perf_counter()
        for s, e in batches(len(split), graphs_per_batch, None, "SubgraphRAG: scoring", threshold=16):
            qs = torch.arange(s, e)
            batch = make_batch(
                split, qs, features, question_emb, emb.entity, emb.entity_has_text, emb.relation, global_ids=True
            )
            edge_ids = batch.edge_ids
            if self.device.type != "cpu":
                batch = batch.to(self.device)
            out[edge_ids] = self.scorer.forward_projected(proj, batch).float().cpu()
        timings["features_s"] += t1 - t0
        timings["scoring_s"] += time.perf_counter() - t1

    @torch.no_grad()
    def score_question(self, graph: QuestionGraph, question_emb: torch.Tensor, emb) -> torch.Tensor:
        """Scores ``[E]`` of one question's triples (serving path: DDE + scoring, no batching)."""
        if self.uses_compiled:
            return self.compiled(emb).score(graph, question_emb)
        cfg = self.scorer.config
        rows = graph_structure(graph.edge_index, graph.topic_mask, cfg.structure, cfg.dde_forward, cfg.dde_reverse)
        batch = question_batch(graph, rows, question_emb, emb.entity, emb.entity_has_text, emb.relation)
        if self.device.type != "cpu":
            batch = batch.to(self.device)
        return self.scorer.forward_projected(self.projections(emb), batch).float().cpu()

    def retrieve(
        self,
        index: KGIndex,
        split_name: str,
        emb,
        path: str | Path | None = None,
        k: int = 500,
        graphs_per_batch: int = 128,
    ) -> torch.Tensor:
        """Score ``index[split_name]``, write the top-``k`` triples per question to ``path`` (if given)."""
        split = index[split_name]
        if split_name not in emb.question:
            raise KeyError(f"no question embeddings for split {split_name!r} (have {sorted(emb.question)})")
        scores = self.score_split(split, emb.question[split_name], emb, graphs_per_batch)
        if path is not None:
            write_results(path, index, split_name, scores, k)
        return scores


def top_k_per_question(scores: torch.Tensor, edge_ptr: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` edge positions per question (``[Q, k]``, -1 where a graph has fewer edges) and their scores."""
    sizes = edge_ptr[1:] - edge_ptr[:-1]
    num_q = sizes.numel()
    width = max(int(sizes.max()) if num_q else 0, 1)
    rows = torch.repeat_interleave(torch.arange(num_q), sizes)
    within = torch.arange(scores.numel()) - torch.repeat_interleave(edge_ptr[:-1], sizes)
    padded = torch.full((num_q, width), float("-inf"))
    padded[rows, within] = scores
    kk = min(k, width)
    vals, idx = padded.topk(kk, dim=1)
    pos = idx + edge_ptr[:-1].unsqueeze(1)
    pos = torch.where(idx < sizes.unsqueeze(1), pos, torch.full_like(pos, -1))
    return pos, vals
