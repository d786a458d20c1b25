"""Ranks inside segments (a question's nodes or edges): shared by the classic retrievers and PPR pruning."""

from __future__ import annotations

import torch


def group_rank(values: torch.Tensor, group: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Rank of every item within its group (0 = highest value; ties by position)."""
    order = torch.argsort(-values, stable=True)
    order = order[torch.argsort(group[order], stable=True)]
    counts = torch.bincount(group, minlength=num_groups)
    starts = counts.cumsum(0) - counts
    rank = torch.empty(values.numel(), dtype=torch.long)
    rank[order] = torch.arange(values.numel()) - starts[group[order]]
    return rank


def segment_rank(values: torch.Tensor, ptr: torch.Tensor) -> torch.Tensor:
    """Rank within CSR segments (``ptr`` offsets), highest first, ties by position."""
    sizes = ptr[1:] - ptr[:-1]
    group = torch.repeat_interleave(torch.arange(sizes.numel()), sizes)
    return group_rank(values, group, sizes.numel())
