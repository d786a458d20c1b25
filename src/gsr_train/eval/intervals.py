"""95% bootstrap intervals over questions, and the paired comparison of two runs.

Every figure a run reports is a statistic of per-question values: a mean (hit, recall@K, chain
match@n, macro F1; a question that has nothing to find is left out), a ratio of sums (Score_h) or the
F1 of summed counts (Micro-F1). `QuestionValues` holds those per-question parts of every metric
of one table row, keyed by question id; the interval of each metric is the 2.5th and 97.5th
percentile of the statistic over ``resamples`` bootstrap resamples of the questions (percentile
bootstrap), seeded, so a run's interval is the same every time it is computed.

The resampling is vectorised: each resample is a row of question counts (drawn with one ``randint``
and one ``bincount`` for a block of resamples), and the weighted sums of every metric's parts come
from one matrix product, so a row of 20 metrics over 35k questions takes about a second for 2000
resamples on a CPU (``bench/bench_intervals.py``).

`paired_difference` compares two runs on the questions they share: the difference of each
metric, its paired-bootstrap 95% interval (the same resampled questions for both runs) and a two-sided
p-value from a paired permutation test (each question's two values swapped at random).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gsr_train.eval.markdown import format_cell, format_estimate  # noqa: F401  (re-exported)
from gsr_train.eval.schema import LEVEL, RESAMPLES, SEED

if TYPE_CHECKING:  # torch loads when a figure is computed: a command that only reads or checks files stays light
    import torch

MAX_CELLS = 1 << 22  # resample-by-question counts drawn at a time (bounds memory on 35k questions)

# the parts each kind of metric keeps per question, and how a (weighted) sum of them is the metric
KINDS = {
    "mean": ("value", "counted"),  # sum(value) / sum(counted): a mean over the questions counted
    "ratio": ("num", "den"),  # sum(num) / sum(den)
    "f1": ("correct", "predicted", "found", "gold"),  # F1 of micro precision and micro recall
}


def statistic(kind: str, sums: torch.Tensor) -> torch.Tensor:
    """The metric of ``kind`` from the sums of its parts (``[..., parts]``); NaN where undefined."""
    import torch

    if kind in ("mean", "ratio"):
        num, den = sums[..., 0], sums[..., 1]
        return torch.where(den > 0, num / den.clamp(min=1e-300), torch.full_like(num, math.nan))
    if kind == "f1":
        c, p, f, g = sums.unbind(-1)
        precision = torch.where(p > 0, c / p.clamp(min=1e-300), torch.zeros_like(c))
        recall = torch.where(g > 0, f / g.clamp(min=1e-300), torch.zeros_like(f))
        total = precision + recall
        return torch.where(total > 0, 2 * precision * recall / total.clamp(min=1e-300), torch.zeros_like(total))
    raise ValueError(f"unknown metric kind {kind!r} (one of {sorted(KINDS)})")


def resample_counts(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> Iterator[torch.Tensor]:
    """Blocks of ``[b, n]`` float64 counts: how often each of ``n`` questions is drawn in each resample
    (``n`` draws with replacement), ``resamples`` rows in all, the same for the same ``n`` and ``seed``."""
    import torch

    gen = torch.Generator().manual_seed(int(seed))
    block = max(1, min(resamples, MAX_CELLS // max(n, 1)))
    for start in range(0, resamples, block):
        b = min(block, resamples - start)
        draws = torch.randint(n, (b, n), generator=gen) + torch.arange(b).unsqueeze(1) * n
        yield torch.bincount(draws.view(-1), minlength=b * n).view(b, n).double()


def swap_masks(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> Iterator[torch.Tensor]:
    """Blocks of ``[b, n]`` 0/1 float64 masks: which questions swap their two runs' values."""
    import torch

    gen = torch.Generator().manual_seed(int(seed) + 1)
    block = max(1, min(resamples, MAX_CELLS // max(n, 1)))
    for start in range(0, resamples, block):
        b = min(block, resamples - start)
        yield torch.randint(2, (b, n), generator=gen).double()


def _percentiles(stats: torch.Tensor, level: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Percentile interval of each column of ``[resamples, metrics]`` (NaN resamples left out)."""
    import torch

    q = torch.tensor([(1 - level) / 2, 1 - (1 - level) / 2], dtype=stats.dtype)
    low_high = torch.nanquantile(stats, q, dim=0)
    return low_high[0], low_high[1]


@dataclass(frozen=True)
class Estimate:
    """A figure and its interval (``low`` / ``high`` None where it has none)."""

    value: float | None
    low: float | None = None
    high: float | None = None

    def text(self, digits: int = 3, scale: float = 1.0) -> str:
        """``0.766 (0.72-0.81)``: the value with ``digits`` decimals, the bounds with one fewer."""
        return format_estimate(self.value, self.low, self.high, digits, scale)


def _column(values: Any) -> torch.Tensor:
    """A float64 copy of one value per question (a tensor, an array or a list)."""
    import torch

    if isinstance(values, torch.Tensor):
        return values.detach().cpu().double().reshape(-1).clone()
    return torch.from_numpy(np.array(values, dtype=np.float64)).reshape(-1)


@dataclass
class QuestionValues:
    """The per-question parts of every metric of one table row: ``ids[i]`` is question ``i``;
    ``parts[name] = (kind, FloatTensor[n, len(KINDS[kind])])``."""

    ids: list[str]
    parts: dict[str, tuple[str, torch.Tensor]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def _put(self, name: str, kind: str, columns: Sequence[Any]) -> QuestionValues:
        import torch

        block = torch.stack([_column(c) for c in columns], 1)
        if block.shape[0] != len(self.ids):
            raise ValueError(f"metric {name!r}: {block.shape[0]} values for {len(self.ids)} questions")
        self.parts[str(name)] = (kind, block)
        return self

    def add_mean(self, name: str, values: Any) -> QuestionValues:
        """A mean over the questions; NaN = the question is not counted (nothing to find)."""
        import torch

        v = _column(values)
        counted = ~torch.isnan(v)
        return self._put(name, "mean", [torch.where(counted, v, torch.zeros_like(v)), counted.double()])

    def add_ratio(self, name: str, num: Any, den: Any) -> QuestionValues:
        """``sum(num) / sum(den)`` over the questions."""
        return self._put(name, "ratio", [num, den])

    def add_f1(self, name: str, correct: Any, predicted: Any, found: Any, gold: Any) -> QuestionValues:
        """The F1 of micro precision (correct / predicted) and micro recall (found / gold)."""
        return self._put(name, "f1", [correct, predicted, found, gold])

    def per_question(self, name: str) -> torch.Tensor:
        """Metric ``name`` of each question on its own (NaN: not counted, or a ratio over nothing)."""
        import torch

        kind, block = self.parts[name]
        with np.errstate(divide="ignore", invalid="ignore"):
            b = block.numpy()
            if kind == "f1":
                precision, recall = b[:, 0] / b[:, 1], b[:, 2] / b[:, 3]
                value = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
                value[np.isnan(precision) | np.isnan(recall)] = np.nan
            else:
                value = b[:, 0] / b[:, 1]
        return torch.from_numpy(np.where(np.isfinite(value), value, np.nan))

    def values(self) -> dict[str, float | None]:
        """Each metric on all the questions."""
        out = {}
        for name, (kind, block) in self.parts.items():
            v = float(statistic(kind, block.sum(0)))
            out[name] = None if math.isnan(v) else v
        return out

    def _stacked(self) -> tuple[torch.Tensor, list[tuple[str, str, slice]]]:
        import torch

        blocks, where, at = [], [], 0
        for name, (kind, block) in self.parts.items():
            blocks.append(block)
            where.append((name, kind, slice(at, at + block.shape[1])))
            at += block.shape[1]
        return (torch.cat(blocks, 1) if blocks else torch.zeros(len(self.ids), 0, dtype=torch.float64)), where

    def intervals(
        self, resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL
    ) -> dict[str, tuple[float, float] | None]:
        """Each metric's percentile bootstrap interval (None where no question counts)."""
        import torch

        if not self.parts or not self.ids:
            return {name: None for name in self.parts}
        columns, where = self._stacked()
        sums = torch.cat([w @ columns for w in resample_counts(len(self.ids), resamples, seed)])
        stats = torch.stack([statistic(kind, sums[:, cols]) for _, kind, cols in where], 1)
        low, high = _percentiles(stats, level)
        return {
            name: None if math.isnan(lo) or math.isnan(hi) else (lo, hi)
            for (name, _, _), lo, hi in zip(where, low.tolist(), high.tolist())
        }

    def estimates(self, resamples: int = RESAMPLES, seed: int = SEED) -> dict[str, Estimate]:
        bounds = self.intervals(resamples, seed)
        return {n: Estimate(v, *(bounds[n] or (None, None))) for n, v in self.values().items()}

    def take(self, ids: Sequence[str]) -> QuestionValues:
        """The rows of ``ids`` (each must be one of ours), in that order."""
        import torch

        position = {q: i for i, q in enumerate(self.ids)}
        index = torch.tensor([position[q] for q in ids], dtype=torch.long)
        return QuestionValues(list(ids), {n: (k, b[index]) for n, (k, b) in self.parts.items()})

    def to_json(self) -> dict[str, Any]:
        """``{"ids": [...], "metrics": {name: {"kind": k, part: [values]}}}`` (JSON-ready; a mean keeps
        ``values``, null where the question is not counted)."""
        metrics: dict[str, Any] = {}
        for name, (kind, block) in self.parts.items():
            if kind == "mean":
                values = [v if c else None for v, c in zip(block[:, 0].tolist(), block[:, 1].tolist())]
                metrics[name] = {"kind": kind, "values": values}
            else:
                metrics[name] = {"kind": kind, **{p: block[:, j].tolist() for j, p in enumerate(KINDS[kind])}}
        return {"ids": list(self.ids), "metrics": metrics}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> QuestionValues:
        """What `to_json` wrote; a malformed document raises ValueError naming the metric."""
        out = cls([str(q) for q in doc["ids"]])
        for name, spec in (doc.get("metrics") or {}).items():
            kind = spec.get("kind") if isinstance(spec, Mapping) else None
            try:
                if kind == "mean":
                    out.add_mean(name, [math.nan if v is None else v for v in spec["values"]])
                elif kind in KINDS:
                    out._put(name, kind, [spec[p] for p in KINDS[kind]])
                else:
                    raise ValueError(f"unknown kind {kind!r} (one of {sorted(KINDS)})")
            except (KeyError, TypeError) as e:
                raise ValueError(f"metric {name!r}: {kind} values without {e}") from None
        return out


@dataclass(frozen=True)
class Difference:
    """``a - b`` of one metric on ``questions`` shared questions: its interval and p-value."""

    metric: str
    questions: int
    a: float | None
    b: float | None
    diff: float | None
    low: float | None
    high: float | None
    p_value: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def paired_difference(
    a: QuestionValues,
    b: QuestionValues,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> list[Difference]:
    """Each metric both rows have, ``a - b`` on the questions both have: the difference, its
    paired-bootstrap percentile interval and a two-sided paired permutation p-value
    (``(1 + #{|d*| >= |d|}) / (1 + permutations)``)."""
    import torch

    in_b = set(b.ids)
    shared = [q for q in a.ids if q in in_b]
    names = [n for n in a.parts if n in b.parts and a.parts[n][0] == b.parts[n][0]]
    if not shared or not names:
        return []
    a, b = a.take(shared), b.take(shared)
    xa = torch.cat([a.parts[n][1] for n in names], 1)
    xb = torch.cat([b.parts[n][1] for n in names], 1)
    slices, at = [], 0
    for name in names:
        width = a.parts[name][1].shape[1]
        slices.append((name, a.parts[name][0], slice(at, at + width)))
        at += width

    def diffs(sums_a: torch.Tensor, sums_b: torch.Tensor) -> torch.Tensor:
        return torch.stack([statistic(k, sums_a[..., s]) - statistic(k, sums_b[..., s]) for _, k, s in slices], -1)

    n = len(shared)
    observed = diffs(xa.sum(0), xb.sum(0))
    boot = torch.cat([diffs(w @ xa, w @ xb) for w in resample_counts(n, resamples, seed)])
    low, high = _percentiles(boot, level)
    total, delta = xa.sum(0) + xb.sum(0), xa - xb
    swapped = []
    for s in swap_masks(n, resamples, seed):  # a question swapped gives b's parts to a, a's to b
        sums_a = xa.sum(0) - s @ delta
        swapped.append(diffs(sums_a, total - sums_a))
    perm = torch.cat(swapped)
    extreme = (perm.abs() >= observed.abs() - 1e-12).sum(0)
    p = (extreme + 1).double() / (perm.shape[0] + 1)
    va, vb = a.values(), b.values()
    out = []
    for j, (name, _, _) in enumerate(slices):
        d = float(observed[j])
        defined = not math.isnan(d)
        out.append(
            Difference(
                name,
                n,
                va[name],
                vb[name],
                d if defined else None,
                float(low[j]) if defined else None,
                float(high[j]) if defined else None,
                float(p[j]) if defined else None,
            )
        )
    return out


# ---------------------------------------------------------------------- across seeds
# two-sided 95% Student t quantiles by degrees of freedom (1..30); beyond, the normal 1.96
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def seed_summary(values: Iterable[float]) -> dict[str, float | int | None]:
    """Mean, sample standard deviation and the 95% Student t interval of the mean of one figure over
    seeds (``n`` runs; one run: no spread, no interval). A figure whose every value is a share (in
    [0, 1]: recall, hit, F1) keeps its interval there: a recall's interval never reaches 1.027."""
    v = [float(x) for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    n = len(v)
    if not n:
        return {"n": 0, "mean": None, "std": None, "low": None, "high": None}
    mean = sum(v) / n
    if n == 1:
        return {"n": 1, "mean": mean, "std": None, "low": None, "high": None}
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / (n - 1))
    half = (_T95[n - 2] if n - 1 <= len(_T95) else 1.96) * std / math.sqrt(n)
    low, high = mean - half, mean + half
    if all(0.0 <= x <= 1.0 for x in v):
        low, high = max(low, 0.0), min(high, 1.0)
    return {"n": n, "mean": mean, "std": std, "low": low, "high": high}
