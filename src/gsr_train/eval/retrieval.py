"""Batched retrieval metrics: triple recall and answer-entity recall at many K at once.

Every retriever is judged on the same per-edge scores (``FloatTensor[sum E]`` aligned with a
`gsr_train.kg.index.SplitGraphs`; higher is better, ``-inf`` means "not retrieved").
Ranking is done per question on padded ``[questions, max edges]`` blocks, with one ``topk``
per block on a tie-free key (float32) or one stable sort, so ties are broken by edge order
and every number is deterministic. Recall at all K comes from one histogram per question:
each positive edge (or answer node) falls into the bucket of the smallest K that covers it,
and a cumulative sum gives the hits at every K.

Metrics, averaged per question (a question that has nothing to find is left out):

* ``sp_recall``: share of the shortest-path triples (weak supervision) in the top K;
* ``labelled_recall``: share of the relevance-labelled triples (e.g. GPT-4o) in the top K,
  over the questions that have labels;
* ``answer_recall``: share of the answer entities that are head or tail of a top-K triple;
  answers absent from the graph count in the denominator and are never covered.

Breakdowns by shortest-path hop count and by number of topic entities come with the
question count of every group.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from rich.table import Table

from gsr_train.arrays import scatter, segment_count
from gsr_train.eval.intervals import QuestionValues, format_cell
from gsr_train.eval.markdown import markdown_table
from gsr_train.eval.schema import COMPARE_KS
from gsr_train.kg.index import SplitGraphs

log = logging.getLogger(__name__)

METRICS = ("sp_recall", "labelled_recall", "answer_recall")
METRIC_TITLES = {
    "sp_recall": "shortest-path triple recall",
    "labelled_recall": "labelled triple recall",
    "answer_recall": "answer entity recall",
}
HOP_GROUPS = ("0", "1", "2", ">=3", "no path")
TOPIC_GROUPS = ("0", "1", ">=2")
NOT_RETRIEVED = 1 << 62  # rank of an edge scored -inf (larger than any K)


# --------------------------------------------------------------------------- ranking


def _check_scores(split: SplitGraphs, scores: torch.Tensor) -> torch.Tensor:
    total = int(split.edge_ptr[-1]) if len(split) else 0
    if not isinstance(scores, torch.Tensor) or scores.dim() != 1 or scores.numel() != total:
        shape = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise ValueError(f"scores must be a 1-D tensor with one value per edge ({total}), got {shape}")
    if not scores.is_floating_point():
        raise ValueError(f"scores must be floating point, got {scores.dtype}")
    if scores.dtype in (torch.float16, torch.bfloat16):
        scores = scores.float()
    nan = torch.isnan(scores)
    if int(torch.count_nonzero(nan)):
        first = int(nan.nonzero()[0])
        q = int(torch.searchsorted(split.edge_ptr.to(scores.device), first, right=True)) - 1
        raise ValueError(
            f"scores contain {int(nan.sum())} NaN values (first: edge {first}, question "
            f"{split.ids[q]!r}); use -inf for 'not retrieved'"
        )
    return scores


def _chunks(sorted_sizes: torch.Tensor, chunk_size: int, max_cells: int) -> list[tuple[int, int]]:
    """Question ranges (over questions sorted by size) with at most ``chunk_size`` questions
    and at most ``max_cells`` padded cells each (one loop step per chunk)."""
    sizes = sorted_sizes.tolist()
    out, start, n = [], 0, len(sizes)
    while start < n:
        end = min(start + chunk_size, n)
        widest = max(sizes[end - 1], 1)
        if (end - start) * widest > max_cells:
            end = start + max(1, max_cells // widest)
        out.append((start, end))
        start = end
    return out


def _float_order_key(values: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """Unique int64 key per cell of a float32 block: higher score first, then lower column.

    The float bits become an int that sorts like the float (a negative float maps to minus
    its magnitude bits, so -0.0 and +0.0 both map to 0), shifted left 32 bits, minus the
    column (< 2^32). No two cells of a row tie, so a plain (unstable) ``topk`` returns
    exactly the stable order.
    """
    bits = values.view(torch.int32)
    key = torch.where(bits < 0, -(bits & 0x7FFFFFFF), bits).long()
    return key.bitwise_left_shift_(32).sub_(col)


@dataclass
class _Layout:
    """Where each edge sits in the padded blocks; depends only on the split's structure.

    Questions are sorted by edge count (``starts`` / ``sizes`` in that order). Each chunk is
    ``(start, end, width, eid, within, lin)``: edges ``eid`` of questions ``start:end`` sit
    at column ``within`` (their position in the question), flat cell ``lin`` of an
    ``[end - start, width]`` block. Chunks are kept only for splits of at most
    ``CACHE_MAX_EDGES`` edges and rebuilt on the fly otherwise, to bound memory.
    """

    starts: torch.Tensor
    sizes: torch.Tensor
    ranges: list[tuple[int, int]]
    n_answers: torch.Tensor  # [Q] answer entities per question (isolated ones included)
    n_topics: torch.Tensor  # [Q] topic entities per question
    cached: list[tuple] | None = None

    def chunks(self):
        if self.cached is not None:
            yield from self.cached
            return
        for start, end in self.ranges:
            sizes = self.sizes[start:end]
            total = int(sizes.sum())
            if total == 0:
                continue
            width = int(sizes[-1])
            row = torch.repeat_interleave(torch.arange(end - start, device=sizes.device), sizes)
            within = torch.arange(total, device=sizes.device).sub_((sizes.cumsum(0) - sizes)[row])
            eid = self.starts[start:end][row].add_(within)
            yield start, end, width, eid, within, row.mul_(width).add_(within)


CACHE_MAX_EDGES = 1 << 23
_LAYOUTS: dict[tuple, tuple[weakref.ref, tuple, _Layout]] = {}


def _layout(split: SplitGraphs, dev: torch.device, chunk_size: int, max_cells: int) -> _Layout:
    """The padded layout of ``split``, cached for the few most recent splits (validation
    metrics are computed on the same split every epoch)."""
    key = (id(split), str(dev), chunk_size, max_cells)
    parts = (split.edge_ptr, split.ent_ptr, split.answer_mask, split.topic_mask)
    hit = _LAYOUTS.get(key)
    if hit is not None and hit[0]() is split and all(a is b for a, b in zip(hit[1], parts)):
        return hit[2]
    n_edges = split.num_edges.to(dev)
    order = torch.argsort(n_edges, stable=True)  # questions, smallest graphs first
    sizes = n_edges[order]
    ent_ptr = split.ent_ptr.to(dev)
    layout = _Layout(
        starts=split.edge_ptr.to(dev)[order],
        sizes=sizes,
        ranges=_chunks(sizes.cpu(), chunk_size, max_cells),
        n_answers=segment_count(split.answer_mask.to(dev), ent_ptr),
        n_topics=segment_count(split.topic_mask.to(dev), ent_ptr),
    )
    if int(split.edge_ptr[-1] if len(split) else 0) <= CACHE_MAX_EDGES:
        layout.cached = list(layout.chunks())
    while len(_LAYOUTS) >= 4:
        _LAYOUTS.pop(next(iter(_LAYOUTS)))
    _LAYOUTS[key] = (weakref.ref(split), parts, layout)
    return layout


def _top_ranks(
    split: SplitGraphs,
    scores: torch.Tensor,
    dev: torch.device,
    chunk_size: int,
    max_cells: int,
    max_rank: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ranks`` (as `edge_ranks`) and the ids of the ranked edges."""
    num_e = scores.numel()
    ranks = torch.full((num_e,), NOT_RETRIEVED, dtype=torch.long, device=dev)
    if num_e == 0:
        return ranks, torch.zeros(0, dtype=torch.long, device=dev)
    lay = _layout(split, dev, chunk_size, max_cells)
    use_key = scores.dtype == torch.float32
    ranked = []
    for start, end, width, eid, within, lin in lay.chunks():
        nq = end - start
        vals = scores[eid]
        if use_key:
            padded = torch.full((nq * width,), torch.iinfo(torch.long).min, dtype=torch.long, device=dev)
            padded = padded.index_copy_(0, lin, _float_order_key(vals, within)).view(nq, width)
        else:
            padded = torch.full((nq * width,), float("-inf"), dtype=scores.dtype, device=dev)
            padded = padded.index_copy_(0, lin, vals).view(nq, width)
        k = width if max_rank is None else min(max_rank, width)
        if use_key:  # unique keys: any top-k / sort gives the stable order
            best = (torch.topk(padded, k, dim=1) if k < width else torch.sort(padded, dim=1, descending=True)).indices
        else:
            best = torch.sort(padded, dim=1, descending=True, stable=True).indices[:, :k]
        picked = lay.starts[start:end].unsqueeze(1) + best
        keep = best < lay.sizes[start:end].unsqueeze(1)  # not padding
        keep &= scores[torch.where(keep, picked, 0)] > float("-inf")
        ids = picked[keep]
        ranks[ids] = torch.arange(k, device=dev).expand(nq, k)[keep]
        ranked.append(ids)
    return ranks, torch.cat(ranked) if ranked else torch.zeros(0, dtype=torch.long, device=dev)


def edge_ranks(
    split: SplitGraphs,
    scores: torch.Tensor,
    device: torch.device | str | None = None,
    chunk_size: int = 256,
    max_cells: int = 1 << 24,
    max_rank: int | None = None,
) -> torch.Tensor:
    """Rank of every edge within its question (0 = best); ``NOT_RETRIEVED`` for ``-inf``.

    Ties are broken by edge order, so the result is deterministic. Questions are sorted by
    edge count and padded in chunks (``chunk_size`` questions, at most ``max_cells`` cells)
    so that little padding is wasted. With ``max_rank`` only the best ``max_rank`` edges of
    each question get a rank (the rest ``NOT_RETRIEVED``), found with ``topk``; float32
    scores are ranked on a tie-free int64 key, float64 scores with a stable sort.
    """
    scores = _check_scores(split, scores)
    dev = torch.device(device) if device is not None else scores.device
    return _top_ranks(split, scores.to(dev), dev, chunk_size, max_cells, max_rank)[0]


def _bucket_hits(question: torch.Tensor, rank: torch.Tensor, ks: torch.Tensor, num_q: int) -> torch.Tensor:
    """``[Q, nK]`` hit counts: item ``j`` of ``question[j]`` with ``rank[j]`` counts at every
    K > rank. Each item falls in the bucket of the smallest K covering it (``nK`` = none);
    a per-question histogram of buckets, summed cumulatively, is the count at every K."""
    num_k = ks.numel()
    bucket = torch.bucketize(rank, ks, right=True)
    hist = torch.bincount(question * (num_k + 1) + bucket, minlength=num_q * (num_k + 1))
    return hist.view(num_q, num_k + 1).cumsum(1)[:, :num_k]


def _ratio(hits: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    return hits.double() / total.clamp(min=1).double().unsqueeze(1)


# --------------------------------------------------------------------------- report


Bounds = dict[str, dict[int, tuple[float, float] | None]]  # metric -> K -> 95% interval (None: undefined)


@dataclass
class GroupMetrics:
    """Metrics of one breakdown group (e.g. 2-hop questions) and their 95% intervals (filled by
    `RetrievalReport.intervals`)."""

    questions: int
    overall: dict[str, dict[int, float | None]]
    counts: dict[str, int]
    intervals: Bounds = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "questions": self.questions,
            "overall": _k_str(self.overall),
            "intervals": _bounds_json(self.intervals),
            "counts": dict(self.counts),
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> GroupMetrics:
        return cls(d["questions"], _k_int(d["overall"]), dict(d["counts"]), _bounds_read(d.get("intervals")))


@dataclass
class RetrievalReport:
    """Recall at every K, overall and per group; ``counts`` = questions each metric averages."""

    ks: list[int]
    questions: int
    overall: dict[str, dict[int, float | None]]
    counts: dict[str, int]
    by_hops: dict[str, GroupMetrics] = field(default_factory=dict)
    by_topics: dict[str, GroupMetrics] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    per_question: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)  # [Q, nK], NaN = not counted
    ids: list[str] = field(default_factory=list, repr=False)  # the questions of per_question's rows
    # breakdown -> [Q] group of each question (its index in HOP_GROUPS / TOPIC_GROUPS)
    group_ids: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    _intervals: Bounds | None = field(default=None, repr=False)

    @property
    def metrics(self) -> list[str]:
        return [m for m in METRICS if m in self.overall]

    @property
    def intervals(self) -> Bounds:
        """95% bootstrap interval over questions of each metric at every K, overall; each breakdown
        group's go on the group (`GroupMetrics.intervals`). All of them come from one resampling
        (a group's metric is the mean over its questions, the others not counted), computed once, on
        first use (validation during training never asks); a report read back from a dict keeps the
        intervals it was written with."""
        if self._intervals is None:
            values = QuestionValues([str(i) for i in range(self.questions)])
            breakdowns = [(self.by_hops, "hops"), (self.by_topics, "topics")]
            for m, v in self.per_question.items():
                for j, k in enumerate(self.ks):
                    column = v[:, j].double()
                    values.add_mean(f"{m}@{k}", column.numpy())
                    for groups, name in breakdowns:
                        for g in groups:
                            values.add_mean(f"{name}={g}|{m}@{k}", self._in_group(column, name, g).numpy())
            bounds = values.intervals()
            self._intervals = {m: {k: bounds[f"{m}@{k}"] for k in self.ks} for m in self.per_question}
            for groups, name in breakdowns:
                for g, gm in groups.items():
                    gm.intervals = {
                        m: {k: bounds.get(f"{name}={g}|{m}@{k}") for k in self.ks} for m in self.per_question
                    }
        return self._intervals

    def _in_group(self, column: torch.Tensor, breakdown: str, group: str) -> torch.Tensor:
        """``column`` with the questions outside ``group`` of ``breakdown`` not counted (NaN)."""
        names = HOP_GROUPS if breakdown == "hops" else TOPIC_GROUPS
        ids = self.group_ids.get(breakdown)
        if ids is None:  # no membership kept: the group gets no interval
            return torch.full_like(column, math.nan)
        inside = ids.to(column.device) == names.index(group)
        return torch.where(inside, column, torch.full_like(column, math.nan))

    def question_values(self, k: int, up_to: int | None = None) -> QuestionValues | None:
        """Each metric's per-question values at ``k`` (named by the metric; when ``k`` is one of ours) and
        at every compared K up to ``up_to`` (``<metric>@<K>``, `COMPARE_KS`); None without them."""
        if not self.per_question or len(self.ids) != self.questions:
            return None
        out = QuestionValues(list(self.ids))
        for m, v in self.per_question.items():
            if k in self.ks:
                out.add_mean(m, v[:, self.ks.index(k)].double().numpy())
            for c in self.ks:
                if c in COMPARE_KS and c <= (k if up_to is None else int(up_to)):
                    out.add_mean(f"{m}@{c}", v[:, self.ks.index(c)].double().numpy())
        return out

    def to_dict(self) -> dict:
        """JSON-ready summary (K keys become strings; averages over no question are null)."""
        bounds = self.intervals  # the groups' too, before they are written
        return {
            "ks": list(self.ks),
            "questions": self.questions,
            "overall": _k_str(self.overall),
            "intervals": _bounds_json(bounds),
            "counts": dict(self.counts),
            "by_hops": {g: m.to_dict() for g, m in self.by_hops.items()},
            "by_topics": {g: m.to_dict() for g, m in self.by_topics.items()},
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> RetrievalReport:
        grp = GroupMetrics.from_dict
        return cls(
            ks=[int(k) for k in d["ks"]],
            questions=int(d["questions"]),
            overall=_k_int(d["overall"]),
            counts=dict(d["counts"]),
            by_hops={g: grp(x) for g, x in d.get("by_hops", {}).items()},
            by_topics={g: grp(x) for g, x in d.get("by_topics", {}).items()},
            meta=dict(d.get("meta", {})),
            _intervals=_bounds_read(d.get("intervals")),
        )

    def flat(self, prefix: str = "") -> dict[str, float]:
        """``{"sp_recall@100": v, ...}`` for loggers and early-stopping monitors."""
        return {f"{prefix}{m}@{k}": v for m, by_k in self.overall.items() for k, v in by_k.items() if v is not None}

    def table(self, title: str | None = None, breakdowns: bool = False, digits: int = 4) -> str:
        """A markdown table: one row per metric, one column per K (plus the question count)."""
        headers = ["metric", "n"] + [f"@{k}" for k in self.ks]
        bounds = self.intervals  # the groups' too
        rows = [
            [m, str(self.counts[m])]
            + [format_cell(self.overall[m].get(k), bounds.get(m, {}).get(k), digits) for k in self.ks]
            for m in self.metrics
        ]
        out = [markdown_table(headers, rows, title)]
        if breakdowns:
            for name, groups in (("hops", self.by_hops), ("topic entities", self.by_topics)):
                if not groups:
                    continue
                headers = [f"{name}", "questions", "metric", "n"] + [f"@{k}" for k in self.ks]
                rows = []
                for g, gm in groups.items():
                    for m in self.metrics:
                        rows.append(
                            [g, str(gm.questions), m, str(gm.counts[m])]
                            + [
                                format_cell(gm.overall[m].get(k), gm.intervals.get(m, {}).get(k), digits)
                                for k in self.ks
                            ]
                        )
                out.append(markdown_table(headers, rows, f"by {name}"))
        return "\n\n".join(out)


def _k_str(d: Mapping[str, Mapping[int, Any]]) -> dict:
    return {m: {str(k): v for k, v in by_k.items()} for m, by_k in d.items()}


def _k_int(d: Mapping[str, Mapping[Any, Any]]) -> dict:
    return {m: {int(k): v for k, v in by_k.items()} for m, by_k in d.items()}


def _bounds_json(bounds: Bounds) -> dict:
    return {m: {str(k): None if b is None else list(b) for k, b in by_k.items()} for m, by_k in bounds.items()}


def _bounds_read(d: Mapping | None) -> Bounds:
    return {
        m: {int(k): None if b is None else (float(b[0]), float(b[1])) for k, b in by_k.items()}
        for m, by_k in (d or {}).items()
    }


def comparison_table(
    reports: Mapping[str, RetrievalReport],
    ks: Sequence[int] | None = None,
    metrics: Sequence[str] | None = None,
    fmt: str = "markdown",
    title: str | None = None,
    digits: int = 4,
):
    """Model x (metric, K) table: a markdown string (``fmt="markdown"``) or a ``rich`` Table."""
    if not reports:
        raise ValueError("comparison_table needs at least one report")
    first = next(iter(reports.values()))
    ks = list(ks) if ks is not None else list(first.ks)
    if metrics is None:
        metrics = [m for m in METRICS if any(m in r.overall for r in reports.values())]
    metrics = list(metrics)
    headers = ["model"] + [f"{m}@{k}" for m in metrics for k in ks]
    rows = []
    for name, rep in reports.items():
        missing_k = [k for k in ks if k not in rep.ks]
        if missing_k:
            raise ValueError(f"report {name!r} has no K={missing_k} (it has {rep.ks})")
        bounds = rep.intervals
        rows.append(
            [name]
            + [
                format_cell(rep.overall.get(m, {}).get(k), bounds.get(m, {}).get(k), digits)
                for m in metrics
                for k in ks
            ]
        )
    if fmt == "markdown":
        return markdown_table(headers, rows, title)
    if fmt == "rich":
        table = Table(title=title)
        for i, h in enumerate(headers):
            table.add_column(h, justify="left" if i == 0 else "right")
        for r in rows:
            table.add_row(*r)
        return table
    raise ValueError(f"fmt must be 'markdown' or 'rich', got {fmt!r}")


# --------------------------------------------------------------------------- metrics


def _check_ks(ks: Sequence[int]) -> list[int]:
    ks = [ks] if isinstance(ks, int) else list(ks)
    if not ks or any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in ks):
        raise ValueError(f"ks must be a non-empty list of positive integers, got {ks!r}")
    return sorted(set(ks))


def _check_mask(name: str, mask: torch.Tensor | None, size: int, what: str) -> None:
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dim() != 1 or mask.numel() != size:
        shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"{name} must be a 1-D tensor with one value per {what} ({size}), got {shape}")


def hop_groups(hops: torch.Tensor) -> torch.Tensor:
    """Group id into `HOP_GROUPS`: 0, 1, 2, >=3 hops, or no path (negative)."""
    return torch.where(hops < 0, torch.full_like(hops, 4), hops.clamp(max=3))


def _check_metric_inputs(
    split: SplitGraphs,
    scores: torch.Tensor,
    ks: Sequence[int],
    sp_label: torch.Tensor | None,
    labelled: torch.Tensor | None,
    labelled_questions: torch.Tensor | None,
    hops: torch.Tensor | None,
) -> tuple[list[int], torch.Tensor]:
    """Every argument check before any work, so a bad call fails at once naming the argument;
    returns the sorted distinct Ks and the scores (half precision widened to float32)."""
    ks = _check_ks(ks)
    scores = _check_scores(split, scores)
    num_q, num_e = len(split), scores.numel()
    _check_mask("sp_label", sp_label, num_e, "edge")
    _check_mask("labelled", labelled, num_e, "edge")
    _check_mask("labelled_questions", labelled_questions, num_q, "question")
    _check_mask("hops", hops, num_q, "question")
    if labelled_questions is not None and labelled is None:
        raise ValueError("labelled_questions given without labelled edges")
    return ks, scores


@dataclass
class _Ranked:
    """The ranked edges (the top ``max(ks)`` of each question): only they can be hits, so every
    metric is counted on them alone."""

    edges: torch.Tensor  # edge ids
    rank: torch.Tensor  # their rank within the question
    question: torch.Tensor  # their question
    kt: torch.Tensor  # the Ks, on the device
    num_q: int
    edge_ptr: torch.Tensor
    ent_ptr: torch.Tensor

    @classmethod
    def of(
        cls, split: SplitGraphs, ranks: torch.Tensor, ranked: torch.Tensor, ks: list[int], dev: torch.device
    ) -> _Ranked:
        edge_ptr, ent_ptr = split.edge_ptr.to(dev), split.ent_ptr.to(dev)
        kt = torch.tensor(ks, dtype=torch.long, device=dev)
        question = torch.searchsorted(edge_ptr, ranked, right=True) - 1
        return cls(ranked, ranks[ranked], question, kt, len(split), edge_ptr, ent_ptr)

    def edge_recall(self, positive: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[Q, nK]`` share of each question's positive edges in its top K, and their count."""
        positive = positive.to(self.kt.device).bool()
        hit = positive[self.edges]
        total = segment_count(positive, self.edge_ptr)
        return _ratio(_bucket_hits(self.question[hit], self.rank[hit], self.kt, self.num_q), total), total

    def answer_recall(self, split: SplitGraphs, n_answers: torch.Tensor) -> torch.Tensor:
        """``[Q, nK]`` share of each question's answers that are head or tail of a top-K edge:
        the best rank of a ranked edge touching each answer node (heads and tails)."""
        dev = self.kt.device
        offsets = self.ent_ptr[self.question]
        nodes = torch.cat(
            [split.edge_index[0].to(dev)[self.edges] + offsets, split.edge_index[1].to(dev)[self.edges] + offsets]
        )
        node_ranks = torch.cat([self.rank, self.rank])
        is_answer = split.answer_mask.to(dev)[nodes]
        answer_nodes, inverse = torch.unique(nodes[is_answer], return_inverse=True)
        # every answer node has a ranked edge (it comes from the ranked edges), so no NOT_RETRIEVED fill
        best = scatter(node_ranks[is_answer], inverse, 0, dim_size=answer_nodes.numel(), reduce="min")
        answer_q = torch.searchsorted(self.ent_ptr, answer_nodes, right=True) - 1
        return _ratio(_bucket_hits(answer_q, best, self.kt, self.num_q), n_answers)


def _labelled_recall(
    ranked: _Ranked, labelled: torch.Tensor, labelled_questions: torch.Tensor | None, meta: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Labelled recall and the questions it counts: those with a labelled edge, within the
    ``labelled_questions`` when given (a labelled question without a labelled edge is left
    out, counted in ``meta`` and warned about)."""
    rec, total = ranked.edge_recall(labelled)
    ok = total > 0
    if labelled_questions is not None:
        lq = labelled_questions.to(ranked.kt.device).bool()
        empty = lq & ~ok
        if bool(empty.any()):
            meta["labelled_questions_without_edges"] = int(empty.sum())
            log.warning("%d questions marked as labelled have no labelled edge; left out", int(empty.sum()))
        ok = lq & ok
    return rec, ok


def _per_question(
    split: SplitGraphs,
    ranked: _Ranked,
    n_answers: torch.Tensor,
    sp_label: torch.Tensor | None,
    labelled: torch.Tensor | None,
    labelled_questions: torch.Tensor | None,
    meta: dict[str, Any],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``[Q, nK]`` values of every metric given (NaN where a question has nothing to find) and
    the ``[Q]`` mask of the questions each metric averages over."""
    per_q: dict[str, torch.Tensor] = {}
    eligible: dict[str, torch.Tensor] = {}
    if sp_label is not None:
        rec, total = ranked.edge_recall(sp_label)
        per_q["sp_recall"], eligible["sp_recall"] = rec, total > 0
    if labelled is not None:
        per_q["labelled_recall"], eligible["labelled_recall"] = _labelled_recall(
            ranked, labelled, labelled_questions, meta
        )
    per_q["answer_recall"], eligible["answer_recall"] = ranked.answer_recall(split, n_answers), n_answers > 0
    for m in per_q:
        per_q[m] = torch.where(eligible[m].unsqueeze(1), per_q[m], torch.full_like(per_q[m], math.nan))
    return per_q, eligible


def _summarise(
    per_q: Mapping[str, torch.Tensor], eligible: Mapping[str, torch.Tensor], ks: list[int], select: torch.Tensor | None
) -> tuple[dict, dict]:
    """Mean of each metric at every K over the eligible questions (within ``select``), and how
    many questions that is; ``None`` where there are none."""
    overall, counts = {}, {}
    for m, values in per_q.items():
        mask = eligible[m] if select is None else eligible[m] & select
        n = int(mask.sum())
        means = values[mask].mean(0).tolist() if n else [None] * len(ks)
        overall[m] = dict(zip(ks, means))
        counts[m] = n
    return overall, counts


def _breakdown(
    per_q: Mapping[str, torch.Tensor],
    eligible: Mapping[str, torch.Tensor],
    ks: list[int],
    group_ids: torch.Tensor,
    names: Sequence[str],
) -> dict[str, GroupMetrics]:
    """Metrics per non-empty group (group ``g`` is named ``names[g]``), with its question count."""
    sizes = torch.bincount(group_ids, minlength=len(names)).tolist()
    out = {}
    for g, name in enumerate(names):
        if sizes[g]:
            o, c = _summarise(per_q, eligible, ks, group_ids == g)
            out[name] = GroupMetrics(sizes[g], o, c)
    return out


def retrieval_metrics(
    split: SplitGraphs,
    scores: torch.Tensor,
    ks: Sequence[int],
    sp_label: torch.Tensor | None = None,
    labelled: torch.Tensor | None = None,
    labelled_questions: torch.Tensor | None = None,
    hops: torch.Tensor | None = None,
    device: torch.device | str | None = None,
    chunk_size: int = 256,
    max_cells: int = 1 << 24,
) -> RetrievalReport:
    """Recall@K for every K in ``ks`` over a whole split (see the module docstring).

    ``sp_label`` / ``labelled``: BoolTensor[sum E] positives; ``labelled_questions``:
    BoolTensor[Q], which questions have a label list (default: those with a labelled edge);
    ``hops``: LongTensor[Q] for the hop breakdown (-1 = no path). ``chunk_size`` questions
    (and at most ``max_cells`` padded cells) are ranked at a time on ``device``.
    """
    ks, scores = _check_metric_inputs(split, scores, ks, sp_label, labelled, labelled_questions, hops)
    dev = torch.device(device) if device is not None else scores.device
    ranks, ranked = _top_ranks(split, scores.to(dev), dev, chunk_size, max_cells, max_rank=ks[-1])
    lay = _layout(split, dev, chunk_size, max_cells)
    meta: dict[str, Any] = {}
    per_q, eligible = _per_question(
        split, _Ranked.of(split, ranks, ranked, ks, dev), lay.n_answers, sp_label, labelled, labelled_questions, meta
    )
    overall, counts = _summarise(per_q, eligible, ks, None)
    report = RetrievalReport(
        ks,
        len(split),
        overall,
        counts,
        meta=meta,
        per_question={m: v.cpu() for m, v in per_q.items()},
        ids=[str(q) for q in split.ids],
    )
    if hops is not None:
        report.group_ids["hops"] = hop_groups(hops.to(dev).long())
        report.by_hops = _breakdown(per_q, eligible, ks, report.group_ids["hops"], HOP_GROUPS)
    report.group_ids["topics"] = lay.n_topics.clamp(max=2)
    report.by_topics = _breakdown(per_q, eligible, ks, report.group_ids["topics"], TOPIC_GROUPS)
    report.group_ids = {name: ids.cpu() for name, ids in report.group_ids.items()}
    return report
