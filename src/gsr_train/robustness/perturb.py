"""OKGQA-P perturbations of the per-question graphs of a `SplitGraphs`.

OKGQA-P (papers/okgqa.txt, sec. 3.2, after Raman et al. 2020) asks whether a KG-based
system stays trustworthy when its KG is wrong. A perturbation level is the fraction of a
question's edges that is perturbed (``round(level * E_q)`` per question). Four methods:

* ``swap`` (relation swapping): the relations of the chosen edges are permuted among them
  (a composition of pairwise swaps). The chosen edges are sorted by relation and each takes
  the relation ``m`` places further on (``m`` = the largest number of chosen edges sharing a
  relation), so no edge keeps its relation unless one relation holds more than half of the
  chosen edges (then some must; they count as touched but not changed).
* ``replace`` (relation replacement): each chosen edge ``(h, r, t)`` gets the relation
  ``r' != r`` that a triple plausibility scorer trained on the unperturbed graph finds
  least plausible for ``(h, ., t)`` (`gsr_train.robustness.kge.PlausibilityScorer`).
* ``rewire`` (edge rewiring): ``(h, r, t) -> (h, r, t')`` with ``t'`` an entity of the same
  question's graph outside the 1-hop neighbourhood of ``h`` (and not ``h``); edges whose head
  is adjacent to every entity cannot be rewired and are never chosen.
* ``delete`` (edge deletion): the chosen edges are removed.

Selection is one random key per edge drawn from ``seed`` (not from the level or method),
so the chosen sets are nested across levels and identical across methods (except that
``rewire`` cannot choose unrewirable edges). ``protect`` (e.g. the gold shortest-path edges)
puts edges out of reach: a question then gets ``min(round(level * E_q), unprotected edges)``.

Everything is vectorised over the whole split; a perturbed edge keeps its position (except
for deletion, where ``origin`` maps each kept edge to its original id), so ``touched`` /
``changed`` masks line up with the original split's per-edge labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from gsr_train.arrays import scatter, segment_count
from gsr_train.kg.index import SplitGraphs

if TYPE_CHECKING:  # pragma: no cover
    from gsr_train.robustness.kge import PlausibilityScorer

METHODS = ("swap", "replace", "rewire", "delete")
REWIRE_ROUNDS = 16


@dataclass
class Perturbed:
    """A perturbed split and how it relates to the original one."""

    split: SplitGraphs  # same questions / entities / masks; edges perturbed
    method: str
    level: float
    seed: int
    origin: torch.Tensor  # [E'] original edge id of every edge of ``split``
    touched: torch.Tensor  # [E] bool: original edges chosen for perturbation
    changed: torch.Tensor  # [E] bool: original edges whose triple differs now (or that were deleted)
    requested: torch.Tensor  # [Q] edges asked for: round(level * E_q)
    chosen_per_question: torch.Tensor  # [Q] edges chosen (requested, capped by protection / eligibility)

    def surviving(self, edge_mask: torch.Tensor) -> torch.Tensor:
        """``[E']`` bool: edges of the perturbed split that carry an unchanged original edge of ``edge_mask``."""
        return (edge_mask & ~self.changed)[self.origin]

    def questions_touched(self, edge_mask: torch.Tensor, original: SplitGraphs) -> torch.Tensor:
        """``[Q]`` bool: questions where some edge of ``edge_mask`` (original ids) was changed."""
        q = original.edge_question()
        hit = (edge_mask & self.changed).long()
        return scatter(hit, q, 0, dim_size=len(original), reduce="sum") > 0

    def summary(self) -> dict:
        total = int(self.touched.numel())
        return {
            "method": self.method,
            "level": self.level,
            "seed": self.seed,
            "edges": total,
            "requested": int(self.requested.sum()),
            "touched": int(self.touched.sum()),
            "changed": int(self.changed.sum()),
            "changed_fraction": float(self.changed.sum()) / total if total else 0.0,
        }


def requested_counts(split: SplitGraphs, level: float) -> torch.Tensor:
    """``round(level * E_q)`` per question (halves round up)."""
    if not 0.0 <= float(level) <= 1.0:
        raise ValueError(f"perturbation level must be in [0, 1], got {level}")
    return torch.floor(split.num_edges.double() * float(level) + 0.5).long()


def select_edges(
    split: SplitGraphs, level: float, seed: int, blocked: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(chosen [E] bool, requested [Q], chosen per question [Q])``.

    Edges are ranked within their question by one random key per edge (from ``seed``);
    ``blocked`` edges go last and are never chosen.
    """
    num_e = int(split.edge_ptr[-1]) if len(split) else 0
    gen = torch.Generator().manual_seed(int(seed))
    key = torch.rand(num_e, generator=gen, dtype=torch.float64)
    if blocked is not None:
        if blocked.shape != (num_e,):
            raise ValueError(f"blocked/protect mask must have one value per edge ({num_e}), got {tuple(blocked.shape)}")
        key = key + blocked.double() * 2.0
    q = split.edge_question()
    order = torch.argsort(key)
    order = order[torch.argsort(q[order], stable=True)]
    rank = torch.empty(num_e, dtype=torch.long)
    rank[order] = torch.arange(num_e) - split.edge_ptr[:-1][q[order]]
    requested = requested_counts(split, level)
    available = split.num_edges - (segment_count(blocked, split.edge_ptr) if blocked is not None else 0)
    n = torch.minimum(requested, available)
    return rank < n[q], requested, n


# --------------------------------------------------------------------------- methods


def _swap(split: SplitGraphs, chosen: torch.Tensor) -> torch.Tensor:
    """New ``edge_rel``: relations of the chosen edges permuted within each question."""
    new_rel = split.edge_rel.to(torch.long, copy=True)
    sel = chosen.nonzero().flatten()
    if sel.numel() == 0:
        return new_rel
    q = split.edge_question()[sel]
    rel = split.edge_rel[sel].long()
    order = torch.argsort(rel, stable=True)
    order = order[torch.argsort(q[order], stable=True)]
    sel, q, rel = sel[order], q[order], rel[order]
    num_q = len(split)
    counts = torch.bincount(q, minlength=num_q)
    starts = counts.cumsum(0) - counts
    pos = torch.arange(sel.numel()) - starts[q]
    run_key = q * (int(rel.max()) + 1) + rel
    _, run_inv, run_len = torch.unique_consecutive(run_key, return_inverse=True, return_counts=True)
    longest = scatter(run_len[run_inv], q, 0, dim_size=num_q, reduce="max")  # lengths >= 1; empty: 0
    n = counts[q]
    src = starts[q] + (pos + longest[q]) % n
    new_rel[sel] = rel[src]
    return new_rel


def _replace(split: SplitGraphs, chosen: torch.Tensor, scorer: PlausibilityScorer) -> torch.Tensor:
    new_rel = split.edge_rel.to(torch.long, copy=True)
    sel = chosen.nonzero().flatten()
    if sel.numel():
        trip = split.global_edges()[sel]
        new_rel[sel] = scorer.least_plausible_relation(trip[:, 0], trip[:, 2], exclude=trip[:, 1])
    return new_rel


def _neighbour_keys(split: SplitGraphs) -> tuple[torch.Tensor, int]:
    """Sorted unique keys ``u * N + v`` of the closed undirected 1-hop neighbourhoods (split-level node ids)."""
    total_n = int(split.ent_ptr[-1])
    offsets = torch.repeat_interleave(split.ent_ptr[:-1], split.num_edges)
    h = split.edge_index[0] + offsets
    t = split.edge_index[1] + offsets
    nodes = torch.arange(total_n)
    keys = torch.cat([h * total_n + t, t * total_n + h, nodes * total_n + nodes])
    return torch.unique(keys), total_n


def rewirable(split: SplitGraphs) -> torch.Tensor:
    """``[E]`` bool: the edge's head is not adjacent to every entity of its question's graph."""
    keys, total_n = _neighbour_keys(split)
    closed = torch.bincount(keys // total_n, minlength=total_n)  # |N1(u) u {u}|
    q = split.edge_question()
    head = split.edge_index[0] + split.ent_ptr[:-1][q]
    return closed[head] < split.num_entities[q]


def _rewire(split: SplitGraphs, chosen: torch.Tensor, seed: int) -> torch.Tensor:
    """New local tails for the chosen edges (rejection sampling, then an exact pick for stragglers)."""
    new_tail = split.edge_index[1].to(torch.long, copy=True)
    sel = chosen.nonzero().flatten()
    if sel.numel() == 0:
        return new_tail
    keys, total_n = _neighbour_keys(split)
    q = split.edge_question()[sel]
    base = split.ent_ptr[:-1][q]
    head = split.edge_index[0][sel] + base
    size = split.num_entities[q]
    gen = torch.Generator().manual_seed(int(seed) + 7919)
    todo = torch.arange(sel.numel())
    for _ in range(REWIRE_ROUNDS):
        if todo.numel() == 0:
            break
        cand = (torch.rand(todo.numel(), generator=gen, dtype=torch.float64) * size[todo]).long()
        cand = torch.minimum(cand, size[todo] - 1)
        k = head[todo] * total_n + base[todo] + cand
        pos = torch.searchsorted(keys, k).clamp(max=keys.numel() - 1)
        ok = keys[pos] != k
        new_tail[sel[todo[ok]]] = cand[ok]
        todo = todo[~ok]
    for i in todo.tolist():  # heads adjacent to almost everything: pick among the few free entities
        n0, n = int(base[i]), int(size[i])
        u = int(head[i])
        lo = int(torch.searchsorted(keys, torch.tensor(u * total_n + n0)))
        hi = int(torch.searchsorted(keys, torch.tensor(u * total_n + n0 + n)))
        taken = keys[lo:hi] - u * total_n - n0
        free = torch.ones(n, dtype=torch.bool)
        free[taken] = False
        options = free.nonzero().flatten()
        pick = int(torch.randint(options.numel(), (1,), generator=gen))
        new_tail[sel[i]] = options[pick]
    return new_tail


def perturb(
    split: SplitGraphs,
    method: str,
    level: float,
    seed: int = 0,
    protect: torch.Tensor | None = None,
    scorer: PlausibilityScorer | None = None,
) -> Perturbed:
    """Perturb ``level`` of each question's edges with ``method`` (see the module docstring)."""
    if method not in METHODS:
        raise ValueError(f"perturbation method must be one of {METHODS}, got {method!r}")
    if method == "replace" and scorer is None:
        raise ValueError("relation replacement needs a triple scorer (scorer=PlausibilityScorer)")
    num_e = int(split.edge_ptr[-1]) if len(split) else 0
    blocked = protect.bool().clone() if protect is not None else None
    if method == "rewire":
        cannot = ~rewirable(split)
        blocked = cannot if blocked is None else blocked | cannot
    chosen, requested, n = select_edges(split, level, seed, blocked)
    origin = torch.arange(num_e)
    if method == "delete":
        keep = ~chosen
        ptr = torch.zeros(len(split) + 1, dtype=torch.long)
        ptr[1:] = segment_count(keep, split.edge_ptr).cumsum(0)
        out = split.with_edges(ptr, split.edge_index[:, keep], split.edge_rel[keep])
        return Perturbed(out, method, float(level), int(seed), origin[keep], chosen, chosen.clone(), requested, n)
    edge_index, edge_rel = split.edge_index, split.edge_rel
    if method == "swap":
        edge_rel = _swap(split, chosen)
        changed = edge_rel != split.edge_rel
    elif method == "replace":
        assert scorer is not None  # checked on entry
        edge_rel = _replace(split, chosen, scorer)
        changed = edge_rel != split.edge_rel
    else:
        tails = _rewire(split, chosen, seed)
        edge_index = torch.stack([split.edge_index[0], tails])
        changed = tails != split.edge_index[1]
    out = split.with_edges(split.edge_ptr, edge_index, edge_rel)
    return Perturbed(out, method, float(level), int(seed), origin, chosen, changed, requested, n)


def check_well_formed(split: SplitGraphs, num_relations: int | None = None) -> None:
    """Raise ``ValueError`` naming the question when a split's arrays are inconsistent."""
    num_e = int(split.edge_ptr[-1]) if len(split) else 0
    if split.edge_ptr.numel() != len(split) + 1 or split.ent_ptr.numel() != len(split) + 1:
        raise ValueError("edge_ptr / ent_ptr must have one entry per question plus one")
    if bool((split.edge_ptr[1:] < split.edge_ptr[:-1]).any()):
        raise ValueError("edge_ptr is not non-decreasing")
    if split.edge_index.shape != (2, num_e) or split.edge_rel.shape != (num_e,):
        raise ValueError(f"edge arrays do not match edge_ptr (sum E = {num_e})")
    if num_e:
        q = split.edge_question()
        size = split.num_entities[q]
        bad = (split.edge_index.min(0).values < 0) | (split.edge_index.max(0).values >= size)
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            raise ValueError(f"edge {i} of question {split.ids[int(q[i])]!r} points outside its graph")
        too_big = num_relations is not None and bool((split.edge_rel >= num_relations).any())
        if bool((split.edge_rel < 0).any()) or too_big:
            raise ValueError("relation id out of the vocabulary")
