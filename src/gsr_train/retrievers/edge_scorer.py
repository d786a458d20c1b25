"""Any trained triple scorer as a retriever: ``retriever=trained retriever.options.checkpoint=CKPT``.

The checkpoint names its own class (:data:`gsr_train.models.edge_scorer.CHECKPOINT_KEY`), so a
scorer trained by ``python train.py +experiment=retrieve retriever._target_=my_pkg.MyScorer``
is served here without knowing ``my_pkg``'s name: readers (``qa.retrieval.retriever=trained``),
the robustness study and eval.py reach it through the registry like any built-in retriever.
Graphs are batched many at a time, in the layout the scorer trained on (the node features its
class asks for, computed for the whole split at once).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gsr_train.features.structure import node_features
from gsr_train.features.triple_batch import make_batch
from gsr_train.kg.index import SplitGraphs
from gsr_train.models.edge_scorer import CheckpointError, EdgeScorerModule, NodeCandidates, load_edge_scorer
from gsr_train.retrievers.interface import ROW_FIELDS, RetrievalInputs, Scores


def check_trained_on(meta: Mapping[str, Any], emb: Any, where: str) -> None:
    """Fail clearly when a scorer meets embeddings of another size or encoder than it trained on
    (the check every trained scorer's checkpoint goes through: ``check_compatible``)."""
    from gsr_train.retrievers.subgraphrag import check_compatible

    try:
        check_compatible({"dim": meta.get("dim") or emb.dim, "meta": meta}, emb)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


log = logging.getLogger(__name__)

ANSWERS_PER_QUESTION = 5  # a node scorer's candidates written into each results row

Candidate = tuple[int, float, tuple[int, ...]]  # (entity id, probability, split edge ids of its path)


def score_split(
    module: EdgeScorerModule, split: SplitGraphs, question_emb: torch.Tensor, emb: Any, graphs_per_batch: int = 64
) -> tuple[torch.Tensor, list[list[Candidate]] | None]:
    """``module``'s logit of every edge of ``split`` (``FloatTensor[sum E]``, no gradients) and, for a
    node scorer, each question's answer candidates, best first, with the path to each."""
    structure = str(module.structure)
    forward, reverse = module.dde_rounds
    features = node_features(split, structure, int(forward), int(reverse))
    device = next(module.parameters(), torch.empty(0)).device
    scores = torch.full((int(split.edge_ptr[-1]),), float("-inf"))
    n = len(split)
    answers: list[list[Candidate]] | None = None
    with torch.no_grad():
        for start in range(0, n, graphs_per_batch):
            questions = list(range(start, min(n, start + graphs_per_batch)))
            batch = make_batch(
                split, questions, features, question_emb, emb.entity, emb.entity_has_text, emb.relation, None
            )
            if device.type != "cpu":
                batch = batch.to(device)
            if batch.num_triples == 0:
                continue
            batch_scores, found = module.score_batch(batch, ANSWERS_PER_QUESTION)
            scores[batch.edge_ids.cpu()] = batch_scores.float().cpu()
            if found is not None:
                answers = answers if answers is not None else [[] for _ in range(n)]
                _collect(answers, split, batch, found)
    return scores, answers


def _collect(answers: list, split: SplitGraphs, batch: Any, found: NodeCandidates) -> None:
    """Append each candidate to its question's list (order kept), its path as split edge ids."""
    assert batch.nodes is not None  # make_batch sets it
    nodes = found.nodes.cpu()  # the split's tables are on the CPU, the batch on any device
    entity = split.entity_ids[batch.nodes.cpu()[nodes]].tolist()
    owner = batch.questions.cpu()[batch.node_q.cpu()[nodes]].tolist()
    if found.paths is not None:
        steps = found.paths.cpu()
        edge_ids = batch.edge_ids.cpu()[steps.clamp(min=0)]
        paths = [
            tuple(e for e, ok in zip(row, valid) if ok) for row, valid in zip(edge_ids.tolist(), (steps >= 0).tolist())
        ]
    else:
        paths = [()] * len(entity)
    for q, e, p, path in zip(owner, entity, found.prob.float().cpu().tolist(), paths):
        answers[q].append((int(e), float(p), path))


def path_text(split: SplitGraphs, q: int, entity: int, edges: Sequence[int], names: Any, relations: Any) -> str:
    """``e0 -> r1 -> e1 <- r2 <- e2``: the path from a topic entity to ``entity`` over ``edges``
    (split edge ids, topic first); arrows follow the stored direction of each triple."""
    n0 = int(split.ent_ptr[q])
    cur = entity
    parts: list[str] = [names(entity)]
    for e in reversed(edges):
        h, t = (int(n0 + x) for x in split.edge_index[:, e].tolist())
        h, t = int(split.entity_ids[h]), int(split.entity_ids[t])
        rel = relations(int(split.edge_rel[e]))
        prev, arrow = (h, "->") if t == cur else (t, "<-")
        parts = [names(prev), arrow, rel, arrow, *parts]
        cur = prev
    return " ".join(parts)


def answer_rows(index: Any, split: SplitGraphs, answers: list[list[Candidate]]) -> dict[str, list]:
    """The ``answers`` (``[{"name", "prob"}]`` best first) and ``paths`` (one evidence path per
    candidate that a topic entity reaches, in the same order) fields of every results row."""
    ids = {e for row in answers for e, _, path in row} | {
        int(split.entity_ids[int(split.ent_ptr[q]) + int(x)])
        for q, row in enumerate(answers)
        for _, _, path in row
        for e in path
        for x in split.edge_index[:, e].tolist()
    }
    order = sorted(ids)
    name_of = dict(zip(order, index.entities.take(order))) if order else {}
    relations = index.relations
    rows, paths = [], []
    for q, row in enumerate(answers):
        rows.append([{"name": name_of[e], "prob": round(p, 4)} for e, p, _ in row])
        paths.append(
            [path_text(split, q, e, path, name_of.__getitem__, relations.__getitem__) for e, _, path in row if path]
        )
    return {"answers": rows, "paths": paths}


def serve(
    module: EdgeScorerModule,
    index: Any,
    split: SplitGraphs,
    question_emb: torch.Tensor,
    emb: Any,
    graphs_per_batch: int,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Scores of a split and the extras of its results rows (a node scorer's ``answers`` and
    ``paths``): the one serving path of a trained scorer, for the registry and for training runs."""
    scores, answers = score_split(module, split, question_emb, emb, graphs_per_batch)
    extra: dict[str, Any] = {}
    if answers is not None:
        extra[ROW_FIELDS] = answer_rows(index, split, answers)
        extra.update(candidate_counts(split, answers))
        if any(extra[key] for key in ("no_topic_entity", "no_candidate", "candidates_without_path")):
            log.info(
                "%d questions without a topic entity (no evidence path), %d without an answer candidate, "
                "%d of %d candidates without a path from a topic entity",
                extra["no_topic_entity"],
                extra["no_candidate"],
                extra["candidates_without_path"],
                extra["candidates"],
            )
    return scores, extra


def candidate_counts(split: SplitGraphs, answers: list[list[Candidate]]) -> dict[str, int]:
    """What a node scorer could not give: questions whose graph has no topic entity, questions
    without any candidate, candidates that no topic entity reaches (their row has no path)."""
    from gsr_train.arrays import segment_sum

    topics = segment_sum(split.topic_mask.numpy().view(np.uint8), split.ent_ptr.numpy())
    return {
        "no_topic_entity": int((topics == 0).sum()),
        "no_candidate": sum(not row for row in answers),
        "candidates": sum(len(row) for row in answers),
        "candidates_without_path": sum(not path for row in answers for _, _, path in row),
    }


class TrainedEdgeScorer:
    """The retriever of a trained :class:`EdgeScorerModule` checkpoint."""

    def __init__(
        self, checkpoint: str | Path, inputs: RetrievalInputs, graphs_per_batch: int = 64, device: str = "cpu"
    ) -> None:
        path = Path(str(checkpoint)).expanduser()
        if not path.is_file():
            raise ValueError(f"retriever 'trained': checkpoint {path} does not exist")
        if inputs.embeddings is None or inputs.question_emb is None:
            raise ValueError("retriever 'trained' needs the run's embeddings (RetrievalInputs.embeddings)")
        try:
            self.module = load_edge_scorer(path, map_location=device)
        except CheckpointError as e:
            raise ValueError(f"retriever 'trained': {e}") from None
        check_trained_on(self.module.meta, inputs.embeddings, f"retriever 'trained' ({path})")
        self.name = type(self.module).__name__
        self.inputs, self.graphs_per_batch, self.checkpoint = inputs, int(graphs_per_batch), str(path)

    def score(self, split: SplitGraphs) -> Scores:
        inputs = self.inputs
        assert inputs.question_emb is not None  # checked when made
        if len(split) != inputs.question_emb.shape[0]:
            raise ValueError(
                f"retriever {self.name!r}: {len(split)} questions to score, {inputs.question_emb.shape[0]} question "
                "embeddings (score the split it was made for)"
            )
        scores, extra = serve(
            self.module, inputs.index, split, inputs.question_emb, inputs.embeddings, self.graphs_per_batch
        )
        return scores, {"checkpoint": self.checkpoint, **extra}
