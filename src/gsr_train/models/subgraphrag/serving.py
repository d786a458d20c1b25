"""Serving one question on CPU: the precomputed-projection path as two compiled kernels.

`TripleScorer.forward_projected` is the general path (CPU and CUDA, one graph or
many). For the common case of one question on CPU, `CompiledQuestionScorer` does
the same arithmetic with the numba kernels of `.serving_kernels` plus one torch
matmul for the question-relation product (small, and MKL does it best), so serving a
question costs a fraction of a millisecond instead of a few. Results agree with the
straightforward forward pass to float rounding (tests check < 1e-4).

Supported: the paper's MLP shape (one hidden layer), any structure (DDE / topic / none),
cosine features and the question-relation product. Other shapes (more hidden layers, the
per-entity question product) use the torch path; `CompiledQuestionScorer.unsupported`
says why.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F

from gsr_train.models.subgraphrag.scorer import Projections, TripleScorer

_STRUCTURE_CODE = {"none": 0, "topic": 1, "dde": 2}


def _numpy(t: torch.Tensor, dtype=None) -> np.ndarray:
    """A CPU numpy view (no copy when ``t`` already is a CPU tensor of that dtype)."""
    if t.device.type != "cpu" or t.requires_grad:
        t = t.detach().cpu()
    a = t.numpy()
    return a if dtype is None or a.dtype == dtype else a.astype(dtype)


@contextlib.contextmanager
def _single_threaded_torch():
    """One torch / MKL thread while worker threads score (restored afterwards): the small
    per-question matmul must not fan out, and must sum in the same order on every thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _kernels():
    # lazy: numba takes about a second to import and compile; only CPU serving needs it
    from gsr_train.models.subgraphrag import serving_kernels

    return serving_kernels


class CompiledQuestionScorer:
    """Scores the triples of one question graph with a trained scorer's `Projections` (CPU)."""

    def __init__(self, scorer: TripleScorer, proj: Projections, relation_emb: torch.Tensor) -> None:
        reason = self.unsupported(scorer)
        if reason:
            raise ValueError(f"compiled serving does not support this scorer: {reason}")
        cfg = scorer.config
        self.config = cfg
        h = cfg.hidden
        with torch.no_grad():
            weight = scorer.first.weight.detach().float().cpu()
            part = {name: weight[:, sl] for name, sl in scorer.slices.items()}
            self.w_q = part["q"].contiguous().numpy()
            self.b_first = scorer.first.bias.detach().float().cpu().contiguous().numpy()
            self.rel_proj = proj.rel.float().cpu().contiguous().numpy()
            self._no_extra = np.zeros((0, h), np.float32)
            self.w_qr_t = part["qr"].t().contiguous() if "qr" in part else None
            self.relation_emb = relation_emb.float().cpu().contiguous()
            num_ent = proj.row_of.numel() - 1
            self.ent_row = proj.row_of[:num_ent].cpu().numpy()
            self.ent = proj.ent.float().cpu().contiguous().numpy()
            self.w_out = scorer.out.weight.detach().float().cpu().reshape(-1).contiguous().numpy()
            self.b_out = float(scorer.out.bias.detach().float().cpu().reshape(()))
            if "sh" in part:
                self.w_struct = torch.cat([part["sh"], part["st"]], dim=0).t().contiguous().numpy()  # [C, 2H]
            else:
                self.w_struct = np.zeros((0, 2 * h), np.float32)
            self.cosines = "cos_h" in part
            if self.cosines:
                if proj.unit is None:
                    raise ValueError("the projections carry no unit-length entity table (needed for cosine features)")
                self.unit = proj.unit.float().cpu().contiguous().numpy()
                self.rel_unit = F.normalize(self.relation_emb, dim=-1).numpy()
                self.w_cos = {k: part[k].reshape(-1).contiguous().numpy() for k in ("cos_h", "cos_t", "cos_r")}
            else:
                self.unit = np.zeros((1, 0), np.float32)
                self.rel_unit = np.zeros((1, 0), np.float32)
                self.w_cos = {k: np.zeros(h, np.float32) for k in ("cos_h", "cos_t", "cos_r")}
        self.num_relations = self.relation_emb.shape[0]
        self.relation_emb_np = self.relation_emb.numpy()
        self._no_q = np.zeros(0, np.float32)
        self._k = _kernels()

    @staticmethod
    def unsupported(scorer: TripleScorer) -> str | None:
        """Why ``scorer`` cannot be served by the kernels (``None`` when it can)."""
        cfg = scorer.config
        if cfg.num_layers != 1:
            return f"{cfg.num_layers} hidden layers (the kernels implement one)"
        if cfg.qe_product:
            return "qe_product (per-entity question products)"
        if cfg.structure not in _STRUCTURE_CODE:
            return f"structure {cfg.structure!r}"
        return None

    def score(self, graph, question_emb: torch.Tensor) -> torch.Tensor:
        """``FloatTensor[E]`` logits of ``graph``'s triples (a `gsr_train.kg.index.QuestionGraph`)."""
        edge_index = _numpy(graph.edge_index)
        out = np.empty(edge_index.shape[1], np.float32)
        where = self.score_arrays(
            edge_index[0],
            edge_index[1],
            _numpy(graph.edge_rel),
            _numpy(graph.topic_mask),
            _numpy(graph.entity_ids),
            _numpy(question_emb, np.float32).reshape(-1),
            out,
        )
        if where is not None:
            raise ValueError(self._error(graph.id, graph.edge_index, graph.edge_rel, graph.entity_ids, *where))
        return torch.from_numpy(out)

    @torch.no_grad()
    def score_split(
        self,
        split,
        question_emb: torch.Tensor,
        out: torch.Tensor | None = None,
        questions: range | None = None,
        workers: int = 1,
    ) -> torch.Tensor:
        """Logits of every triple of a `gsr_train.kg.index.SplitGraphs` (``out [sum E]``,
        written in place for the ``questions`` given, default all), one question at a time.

        ``workers > 1`` scores contiguous runs of questions on that many threads (the kernels
        release the GIL); torch runs single-threaded meanwhile, so every question's numbers
        are the same as with one worker.
        """
        head, tail = _numpy(split.edge_index)
        rel, topic, ent_ids = _numpy(split.edge_rel), _numpy(split.topic_mask), _numpy(split.entity_ids)
        ent_ptr, edge_ptr = split.ent_ptr.tolist(), split.edge_ptr.tolist()
        q_all = _numpy(question_emb, np.float32)
        if out is None:
            out = torch.empty(edge_ptr[-1] if edge_ptr else 0)
        out_np = out.numpy()
        questions = range(len(split)) if questions is None else questions

        def run(part: range) -> None:
            for i in part:
                n0, n1, e0, e1 = ent_ptr[i], ent_ptr[i + 1], edge_ptr[i], edge_ptr[i + 1]
                where = self.score_arrays(
                    head[e0:e1], tail[e0:e1], rel[e0:e1], topic[n0:n1], ent_ids[n0:n1], q_all[i], out_np[e0:e1]
                )
                if where is not None:
                    g = split.graph(i)
                    raise ValueError(self._error(g.id, g.edge_index, g.edge_rel, g.entity_ids, *where))

        workers = max(1, min(int(workers), len(questions)))
        if workers == 1:
            run(questions)
            return out
        chunks = 4 * workers  # contiguous runs, several per worker to even out graph sizes
        bounds = [questions.start + len(questions) * c // chunks for c in range(chunks + 1)]
        parts = [range(bounds[c], bounds[c + 1]) for c in range(chunks)]
        with (
            _single_threaded_torch(),
            ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(1,)) as pool,
        ):
            list(pool.map(run, parts))
        return out

    def score_arrays(self, head, tail, rel, topic, entity_ids, q, out) -> tuple[int, int] | None:
        """Write the logits of one graph (numpy arrays, local node ids) into ``out``; returns
        ``(status, position)`` when the graph is invalid, else ``None``."""
        k = self._k
        cfg = self.config
        status, where, rows, rel_ids, pair_of_triple, distinct, feature_row, products = k.prepare_graph(
            head,
            tail,
            rel,
            topic,
            entity_ids,
            self.ent_row,
            self.num_relations,
            _STRUCTURE_CODE[cfg.structure],
            cfg.dde_forward,
            cfg.dde_reverse,
            self.relation_emb_np,
            q if self.w_qr_t is not None else self._no_q,
        )
        if status != k.OK:
            return status, where
        if self.w_qr_t is not None:  # W_qr (z_q * z_r) for the graph's relations: a small matmul, MKL's job
            extra = torch.mm(torch.from_numpy(products), self.w_qr_t).numpy()
        else:
            extra = self._no_extra
        k.score_triples(
            head,
            tail,
            pair_of_triple,
            rows,
            feature_row,
            distinct,
            rel_ids,
            q,
            self.w_q,
            self.b_first,
            self.rel_proj,
            extra,
            self.w_struct,
            self.ent,
            self.unit,
            self.rel_unit,
            self.w_cos["cos_h"],
            self.w_cos["cos_t"],
            self.w_cos["cos_r"],
            self.w_out,
            self.b_out,
            out,
        )
        return None

    def _error(self, qid, edge_index, edge_rel, entity_ids, status: int, where: int) -> str:
        k = self._k
        name = f"question {qid!r}"
        if status == k.BAD_EDGE:
            return (
                f"{name}: edge {where} refers to node {edge_index[:, where].tolist()} outside [0, {entity_ids.numel()})"
            )
        if status == k.BAD_RELATION:
            return f"{name}: edge {where} has relation id {int(edge_rel[where])}, not in [0, {self.num_relations})"
        if status == k.BAD_ENTITY:
            return f"{name}: node {where} has entity id {int(entity_ids[where])}, not in [0, {self.ent_row.shape[0]})"
        return (
            f"{name}: entity id {int(entity_ids[where])} (node {where}) was not projected; "
            "pass it to precompute(entities=...)"
        )
