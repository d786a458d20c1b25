"""Any trained triple scorer as a retriever: ``retriever=trained retriever.options.checkpoint=CKPT``.

The checkpoint names its own class (`gsr_train.models.edge_scorer.CHECKPOINT_KEY`), so a
scorer trained by ``python train.py +experiment=retrieve retriever._target_=my_pkg.MyScorer``
is served here without knowing ``my_pkg``'s name: readers (``qa.retrieval.retriever=trained``),
the robustness study and eval.py reach it through the registry like any built-in retriever.
Graphs are batched many at a time, in the layout the scorer trained on (the node features its
class asks for, computed for the whole split at once).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gsr_train.arrays import segment_sum
from gsr_train.features.structure import NodeFeatures, structure_features
from gsr_train.features.triple_batch import TripleBatch, make_batch
from gsr_train.kg.index import SplitGraphs
from gsr_train.memory import keep_freed_memory
from gsr_train.models.edge_scorer import CheckpointError, EdgeScorerModule, NodeCandidates, load_edge_scorer
from gsr_train.retrievers.interface import ROW_FIELDS, RetrievalInputs, Scores
from gsr_train.retrievers.subgraphrag import check_compatible


def check_trained_on(meta: Mapping[str, Any], emb: Any, where: str) -> None:
    """Fail clearly when a scorer meets embeddings of another size or encoder than it trained on
    (the check every trained scorer's checkpoint goes through: ``check_compatible``)."""
    try:
        check_compatible({"dim": meta.get("dim") or emb.dim, "meta": meta}, emb)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


log = logging.getLogger(__name__)

ANSWERS_PER_QUESTION = 5  # a node scorer's candidates written into each results row

Candidate = tuple[int, float, tuple[int, ...]]  # (entity id, probability, split edge ids of its path)


@dataclasses.dataclass
class Candidates:
    """A node scorer's answer candidates over a whole split, as flat arrays: grouped by question in
    split order, best first within a question. Kept as arrays (not a Python tuple per candidate) so
    collecting a batch's candidates and writing the rows' names and paths are whole-array steps.

    ``path [M, H]``: the split edge ids of one path from a topic entity to each candidate, topic
    first, ``-1`` after its last step (``H`` = 0 when the scorer gives no paths)."""

    question: np.ndarray  # [M] int64 position of the candidate's question in the split
    entity: np.ndarray  # [M] int64 entity id
    prob: np.ndarray  # [M] float32
    path: np.ndarray  # [M, H] int64

    @classmethod
    def concat(cls, parts: Sequence[Candidates]) -> Candidates:
        """One table of several batches' candidates (paths padded to the widest)."""
        width = max((c.path.shape[1] for c in parts), default=0)
        paths = [np.pad(c.path, ((0, 0), (0, width - c.path.shape[1])), constant_values=-1) for c in parts]
        return cls(
            np.concatenate([c.question for c in parts]) if parts else np.zeros(0, np.int64),
            np.concatenate([c.entity for c in parts]) if parts else np.zeros(0, np.int64),
            np.concatenate([c.prob for c in parts]) if parts else np.zeros(0, np.float32),
            np.concatenate(paths) if parts else np.zeros((0, 0), np.int64),
        )

    def __len__(self) -> int:
        return int(self.question.size)

    def path_lengths(self) -> np.ndarray:
        """``[M]`` steps of each candidate's path (0: no topic entity reaches it)."""
        return (self.path >= 0).sum(1)

    def per_question(self, num_questions: int) -> list[list[Candidate]]:
        """``(entity, prob, path edge ids)`` per question, best first: the candidates as Python
        values, for callers that read a few questions (the results rows do not go through this)."""
        out: list[list[Candidate]] = [[] for _ in range(num_questions)]
        steps = self.path_lengths().tolist()
        for q, e, p, path, n in zip(
            self.question.tolist(), self.entity.tolist(), self.prob.tolist(), self.path.tolist(), steps
        ):
            out[q].append((e, p, tuple(path[:n])))
        return out


def score_split(
    module: EdgeScorerModule, split: SplitGraphs, question_emb: torch.Tensor, emb: Any, graphs_per_batch: int = 64
) -> tuple[torch.Tensor, Candidates | None]:
    """``module``'s logit of every edge of ``split`` (``FloatTensor[sum E]``, no gradients) and, for a
    node scorer, each question's answer candidates, best first, with the path to each.

    Every batch allocates the same few ``[N, hidden]`` and ``[N, 2 * hidden]`` tensors (80-160 MB
    each for 64 WebQSP-size graphs): glibc is told to keep freed blocks up to 1 GB for reuse
    (`gsr_train.memory.keep_freed_memory`, as SubgraphRAG's retriever does with smaller
    ones), else each is mapped afresh and page-faulted in (2-3x slower at 20M rows, and no less
    peak memory)."""
    keep_freed_memory(mmap_threshold=1 << 30, trim_threshold=1 << 31)
    device = next(module.parameters(), torch.empty(0)).device
    scores = torch.full((int(split.edge_ptr[-1]),), float("-inf"))
    n = len(split)
    found_parts: list[Candidates] = []
    node_scorer = False
    with torch.no_grad():
        for start in range(0, n, graphs_per_batch):
            batch = _batch_of(module, split, start, min(n, start + graphs_per_batch), question_emb, emb)
            if device.type != "cpu":
                batch = batch.to(device)
            if batch.num_triples == 0:
                continue
            batch_scores, found = module.score_batch(batch, ANSWERS_PER_QUESTION)
            scores[batch.edge_ids.cpu()] = batch_scores.float().cpu()
            if found is not None:
                node_scorer = True
                found_parts.append(_batch_candidates(split, batch, found))
    return scores, Candidates.concat(found_parts) if node_scorer else None


def _batch_of(
    module: EdgeScorerModule, split: SplitGraphs, start: int, stop: int, question_emb: torch.Tensor, emb: Any
) -> TripleBatch:
    """Questions ``start:stop`` of ``split`` as one batch (positions in the split, as ``make_batch``
    gives them), with the node features ``module`` asks for computed for these graphs alone, one
    row per node. The same rows as `gsr_train.features.structure.node_features` over the
    split (graphs are disjoint), without sorting millions of rows to keep the distinct ones: that
    costs more than projecting a batch's few channels for every node."""
    part = split.slice(start, stop)
    forward, reverse = module.dde_rounds
    dense = structure_features(part, str(module.structure), int(forward), int(reverse))
    features = NodeFeatures(dense, torch.arange(dense.shape[0]))
    batch = make_batch(
        part,
        torch.arange(len(part)),
        features,
        question_emb[start:stop],
        emb.entity,
        emb.entity_has_text,
        emb.relation,
        None,
    )
    assert batch.nodes is not None  # make_batch sets it
    return dataclasses.replace(
        batch,
        edge_ids=batch.edge_ids + int(split.edge_ptr[start]),
        nodes=batch.nodes + int(split.ent_ptr[start]),
        questions=batch.questions + start,
    )


def _batch_candidates(split: SplitGraphs, batch: Any, found: NodeCandidates) -> Candidates:
    """A batch's candidates as split-level arrays: entity ids, questions, paths as split edge ids
    (each path's steps moved to the front of its row, in order, as the rows list them)."""
    assert batch.nodes is not None  # make_batch sets it
    nodes = found.nodes.cpu()  # the split's tables are on the CPU, the batch on any device
    entity = split.entity_ids[batch.nodes.cpu()[nodes]].long().numpy()
    owner = batch.questions.cpu()[batch.node_q.cpu()[nodes]].long().numpy()
    prob = found.prob.float().cpu().numpy()
    if found.paths is None:
        return Candidates(owner, entity, prob, np.zeros((entity.size, 0), np.int64))
    steps = found.paths.cpu()
    valid = (steps >= 0).numpy()
    edge_ids = batch.edge_ids.cpu()[steps.clamp(min=0)].long().numpy()
    front = np.argsort(~valid, axis=1, kind="stable")  # valid steps first, in their order
    path = np.where(np.take_along_axis(valid, front, 1), np.take_along_axis(edge_ids, front, 1), -1)
    return Candidates(owner, entity, prob, path)


def _path_nodes(split: SplitGraphs, found: Candidates) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every candidate's path as it is written, walked back from the candidate to the topic entity
    for all candidates at once: ``node [M, H + 1]`` the entity before each step, then the one after
    the last (``node[:, n]`` is the candidate for a path of ``n`` steps), ``forward [M, H]`` whether
    a step's triple is stored in reading direction (its tail is the next entity), ``rel [M, H]`` its
    relation id. Columns past a path's length are don't-cares."""
    m, width = found.path.shape
    valid = found.path >= 0
    edge = np.where(valid, found.path, 0)
    edge_index, ids = split.edge_index.numpy(), split.entity_ids.numpy()
    base = split.ent_ptr.numpy()[found.question][:, None]
    # padding reads node 0 of the split (another question's edge 0 could point past its graph)
    head = ids[np.where(valid, base + edge_index[0][edge], 0)].astype(np.int64)
    tail = ids[np.where(valid, base + edge_index[1][edge], 0)].astype(np.int64)
    node = np.empty((m, width + 1), np.int64)
    node[:, width] = found.entity
    forward = np.zeros((m, width), bool)
    cur = found.entity.copy()
    for j in range(width - 1, -1, -1):  # one step of every path at a time, the candidate's end first
        forward[:, j] = tail[:, j] == cur
        cur = np.where(valid[:, j], np.where(forward[:, j], head[:, j], tail[:, j]), cur)
        node[:, j] = cur
    return node, forward, split.edge_rel.numpy()[edge].astype(np.int64)


def answer_rows(index: Any, split: SplitGraphs, found: Candidates) -> dict[str, list]:
    """The ``answers`` (``[{"name", "prob"}]`` best first) and ``paths`` (one evidence path per
    candidate that a topic entity reaches, in the same order) fields of every results row:
    ``e0 -> r1 -> e1 <- r2 <- e2``, arrows following the stored direction of each triple.

    The entities and relations the rows name are looked up in one vocabulary call each; only the
    joining of a row's words is done per candidate."""
    steps = found.path_lengths()
    node, forward, rel = _path_nodes(split, found)
    written = np.arange(node.shape[1])[None, :] <= steps[:, None]  # the entities a path names
    named = np.unique(node[written])
    names = index.entities.take(named)
    used = np.unique(rel[found.path >= 0])
    rel_names = dict(zip(used.tolist(), index.relations.take(used)))
    word = np.searchsorted(named, node).tolist()  # node -> position in ``names``
    arrows = np.where(forward, "->", "<-").tolist()
    rels = rel.tolist()
    rows: list[list[dict]] = [[] for _ in range(len(split))]
    paths: list[list[str]] = [[] for _ in range(len(split))]
    for i, (q, p, n) in enumerate(zip(found.question.tolist(), found.prob.tolist(), steps.tolist())):
        at = word[i]
        rows[q].append({"name": names[at[n]], "prob": round(p, 4)})
        if n:
            words = [names[at[0]]]
            for j in range(n):
                words += [arrows[i][j], rel_names[rels[i][j]], arrows[i][j], names[at[j + 1]]]
            paths[q].append(" ".join(words))
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
    scores, found = score_split(module, split, question_emb, emb, graphs_per_batch)
    extra: dict[str, Any] = {}
    if found is not None:
        extra[ROW_FIELDS] = answer_rows(index, split, found)
        extra.update(candidate_counts(split, found))
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


def candidate_counts(split: SplitGraphs, found: Candidates) -> dict[str, int]:
    """What a node scorer could not give: questions whose graph has no topic entity, questions
    without any candidate, candidates that no topic entity reaches (their row has no path)."""
    topics = segment_sum(split.topic_mask.numpy().view(np.uint8), split.ent_ptr.numpy())
    return {
        "no_topic_entity": int((topics == 0).sum()),
        "no_candidate": int(len(split) - np.unique(found.question).size),
        "candidates": len(found),
        "candidates_without_path": int((found.path_lengths() == 0).sum()),
    }


class TrainedEdgeScorer:
    """The retriever of a trained `EdgeScorerModule` checkpoint."""

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
