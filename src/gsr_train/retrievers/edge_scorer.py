"""Any trained triple scorer as a retriever: ``retriever=trained retriever.options.checkpoint=CKPT``.

The checkpoint names its own class (:data:`gsr_train.models.edge_scorer.CHECKPOINT_KEY`), so a
scorer trained by ``python train.py +experiment=retrieve retriever._target_=my_pkg.MyScorer``
is served here without knowing ``my_pkg``'s name: readers (``qa.retrieval.retriever=trained``),
the robustness study and eval.py reach it through the registry like any built-in retriever.
Graphs are batched many at a time, in the layout the scorer trained on (the node features its
class asks for, computed for the whole split at once).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from gsr_train.features.structure import node_features
from gsr_train.features.triple_batch import make_batch
from gsr_train.kg.index import SplitGraphs
from gsr_train.models.edge_scorer import CheckpointError, EdgeScorerModule, load_edge_scorer
from gsr_train.retrievers.interface import ROW_FIELDS, RetrievalInputs, Scores


def check_trained_on(meta: Mapping[str, Any], emb: Any, where: str) -> None:
    """Fail clearly when a scorer meets embeddings of another size or encoder than it trained on
    (the check every trained scorer's checkpoint goes through: ``check_compatible``)."""
    from gsr_train.retrievers.subgraphrag import check_compatible

    try:
        check_compatible({"dim": meta.get("dim") or emb.dim, "meta": meta}, emb)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


ANSWERS_PER_QUESTION = 5  # a node scorer's candidates written into each results row


def score_split(
    module: EdgeScorerModule, split: SplitGraphs, question_emb: torch.Tensor, emb: Any, graphs_per_batch: int = 64
) -> tuple[torch.Tensor, list[list[tuple[int, float]]] | None]:
    """``module``'s logit of every edge of ``split`` (``FloatTensor[sum E]``, no gradients) and, for a
    node scorer, each question's answer candidates as ``(entity id, probability)``, best first."""
    structure = str(module.structure)
    forward, reverse = module.dde_rounds
    features = node_features(split, structure, int(forward), int(reverse))
    device = next(module.parameters(), torch.empty(0)).device
    scores = torch.full((int(split.edge_ptr[-1]),), float("-inf"))
    n = len(split)
    answers: list[list[tuple[int, float]]] | None = None
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
                _collect(answers, split, batch, *found)
    return scores, answers


def _collect(answers: list, split: SplitGraphs, batch: Any, nodes: torch.Tensor, prob: torch.Tensor) -> None:
    """Append each candidate ``(entity id, probability)`` to its question's list (order kept)."""
    assert batch.nodes is not None  # make_batch sets it
    entity = split.entity_ids[batch.nodes[nodes.cpu()]].tolist()
    owner = batch.questions[batch.node_q[nodes].cpu()].tolist()
    for q, e, p in zip(owner, entity, prob.float().cpu().tolist()):
        answers[q].append((int(e), float(p)))


def answer_rows(index: Any, answers: list[list[tuple[int, float]]]) -> dict[str, list]:
    """The ``answers`` field of every results row: ``[{"name", "prob"}]`` best first."""
    flat = [e for row in answers for e, _ in row]
    names = iter(index.entities.take(flat)) if flat else iter(())
    return {"answers": [[{"name": next(names), "prob": round(p, 4)} for _, p in row] for row in answers]}


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
        scores, answers = score_split(self.module, split, inputs.question_emb, inputs.embeddings, self.graphs_per_batch)
        extra: dict[str, Any] = {"checkpoint": self.checkpoint}
        if answers is not None:
            extra[ROW_FIELDS] = answer_rows(inputs.index, answers)
        return scores, extra
