"""One training / scoring batch of several question graphs, in the layout the scorer wants.

The scorer's first layer is linear over ``[z_q || z_h || z_r || z_t || ...]``, so it is
computed part by part (see `gsr_train.models.subgraphrag.scorer`): every *distinct* entity, relation, question
and (question, relation) pair of the batch is projected once and the projections are
gathered per triple. The batch therefore carries the distinct rows, plus index tensors
that say which row each node / triple uses:

* ``ent_emb [U, d]``: text embeddings of the distinct entities *with text* of the batch;
  ``node_ent [N]`` points into it, with ``U`` meaning "no text" (the learned embedding);
* ``node_q [N]``: question of every local entity (nodes of all graphs concatenated);
  ``feat_rows [D, C]`` / ``node_frow [N]``: the batch's distinct structural feature rows
  (DDE) and which one each node has;
* ``rel_emb [V, d]``, ``pair_q [P]``, ``pair_rel [P]``: distinct relations and distinct
  (question, relation) pairs; ``triple_pair [T]`` maps each triple to its pair;
* ``head [T]`` / ``tail [T]``: node ids of each triple (batch-level, offsets applied).

Only the rows a batch needs are gathered from the (memory-mapped) embedding tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch

from gsr_train.features.structure import NodeFeatures
from gsr_train.kg.index import SplitGraphs


@dataclass
class TripleBatch:
    q_emb: torch.Tensor  # [B, d]
    ent_emb: torch.Tensor  # [U, d]
    node_ent: torch.Tensor  # [N] row of ent_emb, U = no text
    node_q: torch.Tensor  # [N]
    feat_rows: torch.Tensor  # [D, C] distinct structural feature rows
    node_frow: torch.Tensor  # [N] row of feat_rows
    rel_emb: torch.Tensor  # [V, d]
    pair_q: torch.Tensor  # [P]
    pair_rel: torch.Tensor  # [P] row of rel_emb
    head: torch.Tensor  # [T]
    tail: torch.Tensor  # [T]
    triple_pair: torch.Tensor  # [T]
    edge_ids: torch.Tensor  # [T] position of each triple in its split (for scores[sum E])
    questions: torch.Tensor  # [B] question positions in the split
    edge_ptr: torch.Tensor  # [B+1] triples per question inside the batch
    labels: torch.Tensor | None = None  # [T] float 0/1
    node_answer: torch.Tensor | None = None  # [N] bool: the node is an answer entity (node scorers' labels)
    nodes: torch.Tensor | None = None  # [N] each node's position in the split's node arrays (its entity id)

    @property
    def num_triples(self) -> int:
        return int(self.head.numel())

    @property
    def num_questions(self) -> int:
        return int(self.q_emb.shape[0])

    def to(self, device: torch.device | str) -> TripleBatch:
        """The batch with every tensor on ``device``."""
        tensors = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(self, **{k: v.to(device) for k, v in tensors.items() if isinstance(v, torch.Tensor)})

    def triple_question(self) -> torch.Tensor:
        return self.pair_q[self.triple_pair]

    @property
    def node_feat(self) -> torch.Tensor:
        """``[N, C]`` structural features of every node (dense; for the reference pass)."""
        return self.feat_rows[self.node_frow]


def _ranges(starts: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """Concatenated ``arange(start, start + size)`` for every pair (vectorised)."""
    total = int(sizes.sum())
    if total == 0:
        return torch.zeros(0, dtype=torch.long)
    shift = torch.repeat_interleave(starts - (sizes.cumsum(0) - sizes), sizes)
    return torch.arange(total) + shift


def make_batch(
    split: SplitGraphs,
    questions: Sequence[int] | torch.Tensor,
    node_features: NodeFeatures | torch.Tensor,
    question_emb: torch.Tensor,
    entity_emb: torch.Tensor,
    entity_has_text: torch.Tensor,
    relation_emb: torch.Tensor,
    labels: torch.Tensor | None = None,
    global_ids: bool = False,
) -> TripleBatch:
    """Batch the graphs of ``questions`` (positions in ``split``).

    ``node_features``: structural features of the whole split (see
    `gsr_train.features.structure.node_features`; a dense ``[sum N, C]`` tensor
    is deduplicated on the fly); ``labels``: ``[sum E]``
    bool/float for the whole split (optional).

    ``global_ids=True`` (inference with precomputed projections): no rows are gathered;
    ``ent_emb`` / ``rel_emb`` are the full tables, ``node_ent`` holds global entity ids
    (``num_entities`` for no text) and ``pair_rel`` global relation ids.
    """
    if isinstance(node_features, torch.Tensor):
        node_features = NodeFeatures.from_dense(node_features)
    qs = torch.as_tensor(questions, dtype=torch.long).reshape(-1)
    n0, n_sizes = split.ent_ptr[qs], split.ent_ptr[qs + 1] - split.ent_ptr[qs]
    e0, e_sizes = split.edge_ptr[qs], split.edge_ptr[qs + 1] - split.edge_ptr[qs]
    node_ids = _ranges(n0, n_sizes)  # positions in the split's node arrays
    edge_ids = _ranges(e0, e_sizes)
    b = torch.arange(qs.numel())
    node_q = torch.repeat_interleave(b, n_sizes)
    edge_q = torch.repeat_interleave(b, e_sizes)
    node_offset = torch.repeat_interleave(n_sizes.cumsum(0) - n_sizes, e_sizes)
    head = split.edge_index[0, edge_ids] + node_offset
    tail = split.edge_index[1, edge_ids] + node_offset

    gid = split.entity_ids[node_ids]
    has = entity_has_text[gid]
    rel = split.edge_rel[edge_ids]
    if global_ids:
        ent_rows = entity_emb
        node_ent = torch.where(has, gid, torch.full_like(gid, entity_emb.shape[0]))
        rel_rows, num_rel, rel_key = relation_emb, relation_emb.shape[0], rel
    else:
        text_ids, inverse = torch.unique(gid[has], return_inverse=True)
        node_ent = torch.full((gid.numel(),), text_ids.numel(), dtype=torch.long)
        node_ent[has] = inverse
        ent_rows = entity_emb[text_ids].float()
        rel_ids, rel_key = torch.unique(rel, return_inverse=True)
        rel_rows, num_rel = relation_emb[rel_ids].float(), rel_ids.numel()
    num_rel = max(num_rel, 1)
    frow_ids, node_frow = torch.unique(node_features.rows[node_ids], return_inverse=True)
    pair_keys, triple_pair = torch.unique(edge_q * num_rel + rel_key, return_inverse=True)

    return TripleBatch(
        q_emb=question_emb[qs].float(),
        ent_emb=ent_rows,
        node_ent=node_ent,
        node_q=node_q,
        feat_rows=node_features.table[frow_ids].float(),
        node_frow=node_frow,
        rel_emb=rel_rows,
        pair_q=pair_keys // num_rel,
        pair_rel=pair_keys % num_rel,
        head=head,
        tail=tail,
        triple_pair=triple_pair,
        edge_ids=edge_ids,
        questions=qs,
        edge_ptr=torch.cat([torch.zeros(1, dtype=torch.long), e_sizes.cumsum(0)]),
        labels=None if labels is None else labels[edge_ids].float(),
        node_answer=split.answer_mask[node_ids],
        nodes=node_ids,
    )


def question_batch(
    graph,
    structure_rows: torch.Tensor,
    question_emb: torch.Tensor,
    entity_emb: torch.Tensor,
    entity_has_text: torch.Tensor,
    relation_emb: torch.Tensor,
) -> TripleBatch:
    """A *global-id* batch of one question graph (the serving path), without deduplication.

    ``graph``: a `gsr_train.kg.index.QuestionGraph`; ``structure_rows [N, C]``: its
    nodes' structural features (each node keeps its own row: for one graph, projecting
    ``N`` rows of ``C`` channels is cheaper than finding the distinct ones).
    """
    n, e = graph.num_entities, graph.num_edges
    gid = graph.entity_ids
    node_ent = torch.where(entity_has_text[gid], gid, torch.full_like(gid, entity_emb.shape[0]))
    rel_ids, triple_pair = torch.unique(graph.edge_rel, return_inverse=True)
    return TripleBatch(
        q_emb=question_emb.reshape(1, -1).float(),
        ent_emb=entity_emb,
        node_ent=node_ent,
        node_q=torch.zeros(n, dtype=torch.long),
        feat_rows=structure_rows.float(),
        node_frow=torch.arange(n),
        rel_emb=relation_emb,
        pair_q=torch.zeros(rel_ids.numel(), dtype=torch.long),
        pair_rel=rel_ids,
        head=graph.edge_index[0],
        tail=graph.edge_index[1],
        triple_pair=triple_pair,
        edge_ids=torch.arange(e),
        questions=torch.zeros(1, dtype=torch.long),
        edge_ptr=torch.tensor([0, e]),
    )
