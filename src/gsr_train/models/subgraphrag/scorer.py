"""SubgraphRAG's triple scorer: an MLP over ``[z_q || z_h || z_r || z_t || z_tau || extras]``.

The first layer is linear over a concatenation, so ``W x = W_q z_q + W_h z_h + W_r z_r +
W_t z_t + ...``: each part can be projected on its own and the projections summed. A
WebQSP graph has ~4,300 triples but only ~1,500 entities and a few dozen relations, and
entities recur across graphs, so `TripleScorer.forward` projects every *distinct*
entity / relation / question / (question, relation) pair of a batch once and gathers the
sums per triple (training uses this path too). `TripleScorer.forward_reference` is
the straightforward concatenate-then-Linear pass; both use the same parameters and agree
to float rounding. For inference, `TripleScorer.precompute` projects every entity
and relation of the KG once per trained model (`Projections`), after which scoring
a question is gathers + one ReLU + a dot product per triple.

Per triple, the first layer's pre-activation is then a sum of rows: two from the entity
projections (head side of the head, tail side of the tail), one per (question, relation)
pair, one per distinct structural (DDE) row of head and tail, plus the cosine features
times their weight columns. That per-triple stage runs as one cache-blocked autograd op
(`.triple_mlp`) for the paper's MLP shape, or as ``embedding_bag`` sums + autograd.

Parts of the input (the ``layout``), all optional except the four embeddings:

* ``sh`` / ``st``: structural features of head / tail (DDE, or the topic one-hot);
* ``cos_h`` / ``cos_r`` / ``cos_t``: cosine similarity of the question with h, r, t
  (a one-layer MLP over a concatenation cannot form a dot product itself; these give it
  the cosine baseline's signal as three scalars);
* ``qr``: ``z_q * z_r`` (question-relation interaction; per (question, relation) pair);
* ``qh`` / ``qt``: ``z_q * z_h`` and ``z_q * z_t`` (per (question, entity) pair: costly).

Entities without text (CVT MIDs) share one learned embedding (``no_text``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gsr_train.features.structure import STRUCTURES, structure_channels
from gsr_train.features.triple_batch import TripleBatch
from gsr_train.models.subgraphrag.triple_mlp import DEFAULT_BLOCK, GPU_BLOCK, triple_mlp


@dataclass
class ScorerConfig:
    """Architecture of the scorer (the defaults are the paper's)."""

    dim: int  # text embedding size
    hidden: int = 1024
    num_layers: int = 1  # hidden layers
    dropout: float = 0.0
    structure: str = "dde"  # dde | topic | none  (paper ablations: "MLP + topic entity", "MLP")
    dde_forward: int = 2
    dde_reverse: int = 2
    cos_features: bool = False
    qr_product: bool = False
    qe_product: bool = False
    fused: bool = False  # torch.compile the per-triple stage instead (execution option; same numbers)
    # dtype of the entity-projection matmul while *training* (bfloat16: mixed precision, several
    # times faster on CPUs with AMX / AVX512-BF16 and on GPUs); evaluation always runs in float32
    train_projection_dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.structure not in STRUCTURES:
            raise ValueError(f"structure must be one of {STRUCTURES}, got {self.structure!r}")
        if self.dim < 1 or self.hidden < 1 or self.num_layers < 1:
            raise ValueError(
                f"dim, hidden and num_layers must be >= 1 (got {self.dim}, {self.hidden}, {self.num_layers})"
            )
        if self.train_projection_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"train_projection_dtype must be float32 or bfloat16, got {self.train_projection_dtype!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @classmethod
    def from_options(cls, options: Mapping[str, Any], dim: int) -> ScorerConfig:
        """From a model config: ``use_dde`` / ``use_topic`` flags or ``structure``; an unknown key
        (a typo, an option of another model family) is an error naming it."""
        opts = dict(options)
        known = {f.name for f in fields(cls)} | {"use_dde", "use_topic", "dde", "name", "family", "train"}
        unknown = sorted(set(opts) - known)
        if unknown:
            raise ValueError(f"model options {unknown} are not SubgraphRAG options (known: {sorted(known - {'dim'})})")
        if "structure" not in opts or opts["structure"] is None:
            use_dde, use_topic = bool(opts.get("use_dde", True)), bool(opts.get("use_topic", True))
            opts["structure"] = "dde" if use_dde else ("topic" if use_topic else "none")
        dde = opts.get("dde") or {}
        opts.setdefault("dde_forward", dde.get("forward_rounds", 2))
        opts.setdefault("dde_reverse", dde.get("reverse_rounds", 2))
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in opts.items() if k in names and k != "dim"}, dim=int(dim))

    @property
    def channels(self) -> int:
        return structure_channels(self.structure, self.dde_forward, self.dde_reverse)

    def layout(self) -> list[tuple[str, int]]:
        d, c = self.dim, self.channels
        parts = [("q", d), ("h", d), ("r", d), ("t", d)]
        if c:
            parts += [("sh", c), ("st", c)]
        if self.cos_features:
            parts += [("cos_h", 1), ("cos_r", 1), ("cos_t", 1)]
        if self.qr_product:
            parts += [("qr", d)]
        if self.qe_product:
            parts += [("qh", d), ("qt", d)]
        return parts

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Projections:
    """First-layer projections of every entity and relation, computed once per trained model.

    ``ent [E + 1, 2H]``: ``[W_h z_e || W_t z_e]`` per entity row, the last row for the learned
    no-text embedding; ``row_of [num_entities + 1]``: projection row of a global entity id
    (index ``num_entities`` = no text); ``rel [R, H]``: ``W_r z_r``.
    """

    ent: torch.Tensor
    row_of: torch.Tensor
    rel: torch.Tensor
    unit: torch.Tensor | None = None  # [E + 1, d] unit-length embeddings per projection row (cosine features)


def _cosine_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (F.normalize(a, dim=-1) * F.normalize(b, dim=-1)).sum(-1)


class TripleScorer(nn.Module):
    """Scores triples (logits); see the module docstring for the two equivalent passes."""

    def __init__(self, config: ScorerConfig, fused: bool | None = None) -> None:
        super().__init__()
        self.config = config
        self.slices: dict[str, slice] = {}
        start = 0
        for name, width in config.layout():
            self.slices[name] = slice(start, start + width)
            start += width
        self.in_features = start
        h = config.hidden
        self.first = nn.Linear(start, h)
        self.hidden_layers = nn.ModuleList(nn.Linear(h, h) for _ in range(config.num_layers - 1))
        self.out = nn.Linear(h, 1)
        self.dropout = nn.Dropout(config.dropout)
        self.no_text = nn.Parameter(torch.randn(config.dim) / math.sqrt(config.dim))
        self.fused = bool(config.fused if fused is None else fused)
        self._compiled: Callable[..., torch.Tensor] | None = None
        self._parts: dict[str, torch.Tensor] | None = None

    # ------------------------------------------------------------------ helpers
    def has(self, name: str) -> bool:
        return name in self.slices

    def weight(self, *names: str) -> torch.Tensor:
        """First-layer weight columns of the named parts, side by side (``[H, width]``).

        Inside a pass the weight is split once (`_split_weight`): every slice taken
        separately would add a full-size gradient buffer in the backward pass.
        """
        parts = (
            self._parts if self._parts is not None else {n: self.first.weight[:, sl] for n, sl in self.slices.items()}
        )
        return parts[names[0]] if len(names) == 1 else torch.cat([parts[n] for n in names], dim=1)

    @contextlib.contextmanager
    def _split_weight(self):
        widths = [sl.stop - sl.start for sl in self.slices.values()]
        self._parts = dict(zip(self.slices, self.first.weight.split(widths, dim=1)))
        try:
            yield
        finally:
            self._parts = None

    def mlp_tail(self, pre: torch.Tensor) -> torch.Tensor:
        """ReLU -> dropout -> (hidden layers) -> logit, from first-layer pre-activations."""
        x = self.dropout(torch.relu(pre))
        for layer in self.hidden_layers:
            x = self.dropout(torch.relu(layer(x)))
        return self.out(x).squeeze(-1)

    def _node_embeddings(self, ent_emb: torch.Tensor, node_ent: torch.Tensor) -> torch.Tensor:
        """``[N, d]`` embedding of every node; the learned no-text row where ``node_ent == U``."""
        u = ent_emb.shape[0]
        is_text = node_ent < u
        rows = (
            ent_emb[node_ent.clamp(max=max(u - 1, 0))].float()
            if u
            else ent_emb.new_zeros(node_ent.numel(), self.config.dim)
        )
        return torch.where(is_text.unsqueeze(1), rows, self.no_text.unsqueeze(0).to(rows.dtype))

    def _node_cosines(self, batch: TripleBatch) -> torch.Tensor:
        """``cos(z_q, z_e)`` per node: via a ``[U+1, B]`` matrix (normalise the batch's distinct
        entities once, one matmul) when that is cheaper than gathering ``[N, d]`` node rows
        (never for a global inference table, where ``U`` is the whole vocabulary)."""
        u, b = batch.ent_emb.shape[0], batch.q_emb.shape[0]
        n = batch.node_ent.numel()
        if (u + 1) * (2 + b / 8) <= 3 * n:  # rough cost model: a matmul flop ~ 1/8 of a memory pass
            ents = F.normalize(torch.cat([batch.ent_emb.float(), self.no_text.unsqueeze(0)]), dim=-1)
            sims = ents @ F.normalize(batch.q_emb, dim=-1).t()  # [U+1, B]
            return sims[batch.node_ent, batch.node_q]
        q_unit = F.normalize(batch.q_emb.float(), dim=-1)  # [B, d]
        nt_cos = q_unit @ F.normalize(self.no_text, dim=0)  # [B]: the learned no-text row
        is_text = batch.node_ent < u
        if u == 0:
            return nt_cos[batch.node_q]
        rows = batch.ent_emb[batch.node_ent.clamp(max=u - 1)].float()  # [N, d]
        dots = rows @ q_unit[0] if b == 1 else (rows * q_unit[batch.node_q]).sum(1)
        text_cos = dots / rows.norm(dim=1).clamp_min(1e-12)
        return torch.where(is_text, text_cos, nt_cos[batch.node_q])

    def _pair_terms(self, batch: TripleBatch, rel_part: torch.Tensor) -> torch.Tensor:
        """``[P, H]``: question + relation (+ interaction) parts and the bias, per (q, r) pair."""
        q_part = F.linear(batch.q_emb, self.weight("q"), self.first.bias)  # [B, H]
        out = q_part[batch.pair_q] + rel_part
        if self.has("cos_r") or self.has("qr"):
            zq, zr = batch.q_emb[batch.pair_q], batch.rel_emb[batch.pair_rel].float()
            if self.has("cos_r"):
                out = out + _cosine_rows(zq, zr).unsqueeze(1) * self.weight("cos_r").t()
            if self.has("qr"):
                out = out + F.linear(zq * zr, self.weight("qr"))
        return out

    def _feature_terms(self, feat_rows: torch.Tensor) -> torch.Tensor:
        """``[D, 2H]``: head-side and tail-side projections of each distinct structural row."""
        w = torch.cat([self.weight("sh"), self.weight("st")], dim=0)  # [2H, C]
        return F.linear(feat_rows.float(), w)

    def _qe_terms(self, batch: TripleBatch) -> torch.Tensor:
        """``[N, 2H]``: ``W_qh (z_q * z_e)`` and ``W_qt (z_q * z_e)`` per node (the costly option)."""
        prod = self._node_embeddings(batch.ent_emb, batch.node_ent) * batch.q_emb[batch.node_q]
        return F.linear(prod, torch.cat([self.weight("qh"), self.weight("qt")], dim=0))

    def _triple_parts(
        self,
        batch: TripleBatch,
        ent_halves: torch.Tensor,
        ent_rows: torch.Tensor,
        pair_terms: torch.Tensor,
        cos: torch.Tensor | None = None,
    ) -> tuple:
        """What each triple sums: two bags of first-layer rows plus rank-1 terms.

        * entity bag: ``ent_halves`` (rows ``2e``: head side of entity row ``e``; ``2e + 1``:
          tail side) at ``[T, 2]`` indices (``ent_rows [N]`` is each node's entity row);
        * small bag: one table stacking the (question, relation) pair terms, the structural
          feature projections (and the per-node question-entity terms), at ``[T, k]``
          indices; the cosine weight columns are rows of it too (``rank1_rows``), added
          with the per-triple cosine values ``rank1_w [T, 2]`` as weights.
        """
        head, tail = batch.head, batch.tail
        h = self.config.hidden
        ent_idx = torch.stack([2 * ent_rows[head], 2 * ent_rows[tail] + 1], dim=1)
        tables, cols = [pair_terms], [batch.triple_pair]
        offset = pair_terms.shape[0]
        if self.has("sh"):
            feat = self._feature_terms(batch.feat_rows).reshape(-1, h)
            tables.append(feat)
            cols += [offset + 2 * batch.node_frow[head], offset + 2 * batch.node_frow[tail] + 1]
            offset += feat.shape[0]
        if self.has("qh"):
            qe = self._qe_terms(batch).reshape(-1, h)
            tables.append(qe)
            cols += [offset + 2 * head, offset + 2 * tail + 1]
            offset += qe.shape[0]
        rank1_w: torch.Tensor | None = None
        rank1_rows: tuple[int, ...] = ()
        if self.has("cos_h"):
            cos = self._node_cosines(batch) if cos is None else cos
            tables.append(torch.cat([self.weight("cos_h"), self.weight("cos_t")], dim=1).t())
            rank1_w, rank1_rows = torch.stack([cos[head], cos[tail]], dim=1), (offset, offset + 1)
        small = tables[0] if len(tables) == 1 else torch.cat(tables, dim=0)
        return ent_halves, ent_idx, small, torch.stack(cols, dim=1), rank1_w, rank1_rows

    def _triple_logits(
        self,
        ent: torch.Tensor,
        ent_idx: torch.Tensor,
        small: torch.Tensor,
        small_idx: torch.Tensor,
        rank1_w: torch.Tensor | None = None,
        rank1_rows: tuple[int, ...] = (),
    ) -> torch.Tensor:
        """Per triple: sum its rows of both bags and its rank-1 terms, then the rest of the MLP.

        This is the only part whose cost scales with the number of triples. The paper's
        shape (one hidden layer, no dropout while training) runs as one cache-blocked op
        (`.triple_mlp`); other shapes as two ``embedding_bag`` sums + autograd, or, with
        ``fused=True``, through ``torch.compile``.
        """
        r_rows = small[list(rank1_rows)] if rank1_rows else None
        if self.fused:
            if self._compiled is None:
                self._compiled = torch.compile(self._fused_logits, dynamic=True)
            return self._compiled(ent, ent_idx, small, small_idx, rank1_w, r_rows)
        if not self.hidden_layers and (self.config.dropout == 0 or not self.training):
            return triple_mlp(ent, ent_idx, small, small_idx, self.out.weight, self.out.bias, rank1_w, rank1_rows)
        pre = F.embedding_bag(ent_idx, ent, mode="sum") + F.embedding_bag(small_idx, small, mode="sum")
        if r_rows is not None:
            assert rank1_w is not None, "rank1_rows given without rank1_w"
            pre = pre + rank1_w @ r_rows
        return self.mlp_tail(pre)

    def _fused_logits(self, ent, ent_idx, small, small_idx, rank1_w, r_rows):
        pre = ent[ent_idx].sum(1) + small[small_idx].sum(1)
        if r_rows is not None:
            pre = pre + rank1_w @ r_rows
        return self.mlp_tail(pre)

    # ------------------------------------------------------------------ passes
    def entity_weight(self) -> torch.Tensor:
        """``[2H, d]``: ``W_h`` stacked over ``W_t`` (one matmul projects both sides)."""
        return torch.cat([self.weight("h"), self.weight("t")], dim=0)

    def forward(self, batch: TripleBatch) -> torch.Tensor:
        """Logits ``[T]`` via per-part projections of the batch's distinct rows."""
        with self._split_weight():
            return self._forward(batch)

    def _forward(self, batch: TripleBatch) -> torch.Tensor:
        w_ent = self.entity_weight()
        # the no-text row joins the (small) input, not the [U + 1, 2H] output: no output copy
        ent_in = torch.cat([batch.ent_emb.float(), self.no_text.unsqueeze(0)])
        if self.training and self.config.train_projection_dtype == "bfloat16":
            ent_proj = F.linear(ent_in.to(torch.bfloat16), w_ent.to(torch.bfloat16)).float()
        else:
            ent_proj = F.linear(ent_in, w_ent)
        rel_proj = F.linear(batch.rel_emb.float(), self.weight("r"))[batch.pair_rel]
        ent_halves = ent_proj.reshape(-1, self.config.hidden)
        parts = self._triple_parts(batch, ent_halves, batch.node_ent, self._pair_terms(batch, rel_proj))
        return self._triple_logits(*parts)

    def forward_reference(self, batch: TripleBatch) -> torch.Tensor:
        """Logits ``[T]`` the straightforward way: build ``[T, in_features]`` and apply the MLP."""
        tq = batch.triple_question()
        zq = batch.q_emb[tq]
        ent = self._node_embeddings(batch.ent_emb, batch.node_ent)
        zh, zt = ent[batch.head], ent[batch.tail]
        zr = batch.rel_emb[batch.pair_rel[batch.triple_pair]].float()
        parts = {"q": zq, "h": zh, "r": zr, "t": zt}
        if self.has("sh"):
            feat = batch.node_feat
            parts["sh"], parts["st"] = feat[batch.head], feat[batch.tail]
        if self.has("cos_h"):
            parts["cos_h"] = _cosine_rows(zq, zh).unsqueeze(1)
            parts["cos_r"] = _cosine_rows(zq, zr).unsqueeze(1)
            parts["cos_t"] = _cosine_rows(zq, zt).unsqueeze(1)
        if self.has("qr"):
            parts["qr"] = zq * zr
        if self.has("qh"):
            parts["qh"], parts["qt"] = zq * zh, zq * zt
        x = torch.cat([parts[name] for name, _ in self.config.layout()], dim=1)
        return self.mlp_tail(self.first(x))

    # ------------------------------------------------------------------ inference
    @torch.no_grad()
    def precompute(
        self,
        entity_emb: torch.Tensor,
        entity_has_text: torch.Tensor,
        relation_emb: torch.Tensor,
        entities: torch.Tensor | None = None,
        chunk_rows: int = 1 << 15,
    ) -> Projections:
        """Project every entity (or only ``entities``, global ids) and every relation once."""
        num_ent = entity_emb.shape[0]
        has = entity_has_text.bool()
        ids = torch.arange(num_ent) if entities is None else torch.as_tensor(entities, dtype=torch.long).unique()
        ids = ids[has[ids]]
        w_ent = self.entity_weight()
        dev = w_ent.device
        ent = torch.empty(ids.numel() + 1, w_ent.shape[0], device=dev)
        for s in range(0, ids.numel(), chunk_rows):
            chunk = ids[s : s + chunk_rows]
            ent[s : s + chunk.numel()] = F.linear(entity_emb[chunk].to(dev, torch.float32), w_ent)
        ent[-1] = F.linear(self.no_text, w_ent)
        row_of = torch.full((num_ent + 1,), ids.numel(), dtype=torch.long, device=dev)
        row_of[ids.to(dev)] = torch.arange(ids.numel(), device=dev)
        present = torch.zeros(num_ent, dtype=torch.bool)
        present[ids] = True
        row_of[:num_ent][(has & ~present).to(dev)] = -1  # text entity that was not projected
        rel = F.linear(relation_emb.to(dev, torch.float32), self.weight("r"))
        unit = None
        if self.has("cos_h"):
            unit = torch.empty(ids.numel() + 1, entity_emb.shape[1], device=dev)
            for s in range(0, ids.numel(), chunk_rows):
                chunk = ids[s : s + chunk_rows]
                unit[s : s + chunk.numel()] = F.normalize(entity_emb[chunk].to(dev, torch.float32), dim=-1)
            unit[-1] = F.normalize(self.no_text.detach(), dim=0)
        return Projections(ent=ent, row_of=row_of, rel=rel, unit=unit)

    def _projected_cosines(self, proj: Projections, batch: TripleBatch, rows: torch.Tensor) -> torch.Tensor:
        """``cos(z_q, z_e)`` per node from the unit-length table of `Projections`."""
        unit = proj.unit
        assert unit is not None, "unit-length table missing: built only with the cos_h channel"
        q_unit = F.normalize(batch.q_emb.float(), dim=-1)
        if q_unit.shape[0] == 1:
            return unit.index_select(0, rows) @ q_unit[0]
        # many graphs: entities recur across them, so one [U, B] matmul over the distinct
        # rows beats gathering an [N, d] block and a question row per node
        uniq, inverse = torch.unique(rows, return_inverse=True)
        if uniq.numel() * q_unit.shape[0] <= 16 * rows.numel():
            sims = unit.index_select(0, uniq) @ q_unit.t()  # [U, B]
            return sims[inverse, batch.node_q]
        return (unit.index_select(0, rows) * q_unit.index_select(0, batch.node_q)).sum(1)

    @torch.no_grad()
    def node_terms(self, proj: Projections, batch: TripleBatch, rows: torch.Tensor) -> torch.Tensor:
        """``[N, 2H]``: everything of the first layer that depends on one node only.

        Head side ``[:H]`` and tail side ``[H:]`` of each node: its entity projection, its
        structural-feature projection, its question-cosine times the cosine weight columns
        (and the question-entity product terms). Built once per node, so each triple only
        sums two node rows and one (question, relation) row from tables that stay in cache.
        """
        node = proj.ent.index_select(0, rows)
        if self.has("sh"):
            node += self._feature_terms(batch.feat_rows).index_select(0, batch.node_frow)
        if self.has("cos_h"):
            cos = self._projected_cosines(proj, batch, rows).unsqueeze(1)
            h = self.config.hidden
            node[:, :h].addmm_(cos, self.weight("cos_h").t())
            node[:, h:].addmm_(cos, self.weight("cos_t").t())
        if self.has("qh"):
            node += self._qe_terms(batch)
        return node

    @torch.no_grad()
    def forward_projected(self, proj: Projections, batch: TripleBatch, chunk_triples: int = 512) -> torch.Tensor:
        """Logits ``[T]`` from `Projections` for a *global* batch (``global_ids=True``).

        Only per-question work is left: the question part and pair interactions, the node
        terms (`node_terms`; for one question) or per-node cosines and the distinct
        structural rows (many questions), and per triple a few row gathers, a ReLU and the
        output layer in cache-sized blocks. A single graph is small enough for its per-node
        table to stay in cache; a batch of many graphs is not, and then each triple gathers
        its rows from the global projection table directly.
        """
        h = self.config.hidden
        rows = proj.row_of[batch.node_ent]
        if bool((rows < 0).any()):
            raise ValueError("batch has entities that were not projected; pass them to precompute(entities=...)")
        with self._split_weight():  # slice the first layer's weight once, not per part
            pair = self._pair_terms(batch, proj.rel.index_select(0, batch.pair_rel))
            if batch.num_questions == 1:
                node = self.node_terms(proj, batch, rows).reshape(-1, h)  # rows 2n: head side, 2n + 1: tail side
                parts = (
                    node,
                    torch.stack([2 * batch.head, 2 * batch.tail + 1], dim=1),
                    pair,
                    batch.triple_pair.unsqueeze(1),
                    None,
                    (),
                )
            else:
                parts = self._global_parts(proj, batch, rows, pair)
        if self.fused:
            return self._triple_logits(*parts)
        if not self.hidden_layers:
            # no backward pass to keep small: blocks as large as fit in L2 (fewer, bigger kernels)
            block = max(DEFAULT_BLOCK, (1 << 19) // h) if pair.device.type == "cpu" else GPU_BLOCK
            return triple_mlp(
                parts[0], parts[1], parts[2], parts[3], self.out.weight, self.out.bias, parts[4], parts[5], block=block
            )
        ent, ent_idx, small, small_idx, rank1_w, rank1_rows = parts
        out = torch.empty(batch.num_triples, device=pair.device)
        for s in range(0, batch.num_triples, chunk_triples):  # cache-sized [chunk, H] temporaries
            e = min(s + chunk_triples, batch.num_triples)
            out[s:e] = self._triple_logits(
                ent, ent_idx[s:e], small, small_idx[s:e], None if rank1_w is None else rank1_w[s:e], rank1_rows
            )
        return out

    def _global_parts(self, proj: Projections, batch: TripleBatch, rows: torch.Tensor, pair: torch.Tensor) -> tuple:
        """Per-triple bags over the global entity table (see `_triple_parts`)."""
        cos = self._projected_cosines(proj, batch, rows) if self.has("cos_h") else None
        return self._triple_parts(batch, proj.ent.reshape(-1, self.config.hidden), rows, pair, cos)
