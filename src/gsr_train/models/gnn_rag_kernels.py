"""Message passing of :class:`~gsr_train.models.gnn_rag.QuestionRelationConv` without per-triple temporaries.

Each reasoning round averages ``x[sender] * rel[pair]`` over every node's incoming triples, in both
directions. Written as ``MessagePassing.propagate`` that is three ``[T, hidden]`` tensors per
direction (the gathered senders, the gathered relation rows, their product) before the scatter: at
WebQSP size (~280k triples per batch of 64 graphs) each is ~140 MB, written and read back once per
round and direction, and allocated anew each time (page faults). Serving needs no gradients, so
:func:`relation_means` sums the products straight into the ``[N, hidden]`` output:

* on CPU, a compiled kernel walks each node's incoming triples (triple order kept, so every sum is
  the same float32 additions in the same order as ``scatter_add_``: bit-identical means), node
  ranges split over threads (``nogil``);
* on any other device (or dtype), ``index_select`` + ``mul_`` + ``index_add_`` into the output
  view (one ``[T, hidden]`` temporary per direction instead of five).

:func:`incoming` (each node's incoming triples, in triple order, and their count) depends only on
the graph, so a batch computes it once per direction and every round reuses it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
from numba import njit


@dataclass
class Incoming:
    """Every node's incoming triples along one direction: ``order [T]`` triple positions sorted by
    receiver (stable: triple order within a receiver), ``ptr [N + 1]`` where each receiver's run
    starts, ``count [N]`` float in-degree clamped to 1 (the divisor of a mean, as PyG's)."""

    order: torch.Tensor
    ptr: torch.Tensor
    count: torch.Tensor


def incoming(receiver: torch.Tensor, num_nodes: int, dtype: torch.dtype = torch.float32) -> Incoming:
    """:class:`Incoming` of the triples whose receiving node is ``receiver [T]`` (on its device)."""
    order = torch.argsort(receiver, stable=True)
    degree = torch.bincount(receiver, minlength=num_nodes)
    ptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=receiver.device)
    ptr[1:] = degree.cumsum(0)
    return Incoming(order, ptr, degree.to(dtype).clamp(min=1))


@njit(cache=True, nogil=True)
def _mean_products(out, x, rel, pair, sender, order, ptr, v0, v1):  # pragma: no cover - compiled
    """``out[v] = mean over v's incoming triples e of x[sender[e]] * rel[pair[e]]`` for ``v`` in
    ``[v0, v1)``: float32 products summed from zero in triple order, then divided by the count.
    Sums go through a contiguous row (``out`` may be a strided view) so the loops vectorise."""
    width = x.shape[1]
    acc = np.empty(width, np.float32)
    for v in range(v0, v1):
        acc[:] = 0.0
        start, stop = ptr[v], ptr[v + 1]
        for k in range(start, stop):
            e = order[k]
            xs = x[sender[e]]
            rs = rel[pair[e]]
            for c in range(width):
                acc[c] += xs[c] * rs[c]
        if stop - start > 1:
            n = np.float32(stop - start)
            for c in range(width):
                acc[c] /= n
        out[v, :] = acc


def _node_ranges(ptr: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """``parts`` runs of consecutive nodes with about the same number of incoming triples each
    (graphs are hub-heavy: equal node counts would leave one thread the hubs)."""
    n, total = ptr.shape[0] - 1, int(ptr[-1])
    cuts = np.searchsorted(ptr, np.linspace(0, total, parts + 1)[1:-1], side="left").clip(0, n)
    bounds = [0, *sorted(int(c) for c in cuts), n]
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def relation_means(
    out: torch.Tensor,
    x: torch.Tensor,
    rel: torch.Tensor,
    pair: torch.Tensor,
    sender: torch.Tensor,
    receiver: torch.Tensor,
    into: Incoming,
) -> torch.Tensor:
    """``out [N, hidden]`` (a view is fine) ``= mean_{e -> v} x[sender[e]] * rel[pair[e]]``: the mean
    aggregation of ``QuestionRelationConv.message`` without gradients, on ``x``'s device."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or rel.dtype != torch.float32:
        msg = x.index_select(0, sender)
        msg.mul_(rel.index_select(0, pair))
        out.zero_().index_add_(0, receiver, msg)
        return out.div_(into.count[:, None])
    xs, rs = x.detach().contiguous().numpy(), rel.detach().contiguous().numpy()
    args = (pair.numpy(), sender.numpy(), into.order.numpy(), into.ptr.numpy())
    target = out.numpy()  # a view of out: the kernel writes in place
    ranges = _node_ranges(args[3], max(torch.get_num_threads(), 1))
    if len(ranges) <= 1:
        _mean_products(target, xs, rs, *args, 0, x.shape[0])
        return out
    for job in [_pool(len(ranges)).submit(_mean_products, target, xs, rs, *args, a, b) for a, b in ranges]:
        job.result()
    return out


_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool(workers: int) -> ThreadPoolExecutor:
    """A kept pool of ``workers`` threads: a batch makes six kernel calls per round trip, and
    starting threads for each costs more than a small graph's sums."""
    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="gnn-rag-means")
    return _POOLS[workers]
