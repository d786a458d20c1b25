"""The per-triple stage of the scorer as one cache-blocked autograd op.

Per triple ``i`` the scorer computes ``logit_i = w . relu(sum_j A[a_ij] + sum_j B[b_ij] + sum_m c_im B[r_m]) + b``:
two bags of first-layer rows (entity projections ``A``; pair / structural rows ``B``),
rank-1 terms (cosine features times their weight columns, stored as rows of ``B``), a
ReLU and the output layer. Written with ordinary
autograd this makes a dozen passes over ``[T, H]`` tensors (tens of MB per batch) that
live in main memory: the step is memory-bound. This op processes the triples in blocks
of ``block`` rows that stay in the L2 cache, keeps nothing of size ``[T, H]`` between
forward and backward (the block's pre-activations are recomputed), and accumulates the
gradients of ``A``, ``B``, ``c``, ``w`` and ``b`` block by block. Row order of the
accumulation is fixed, so results are deterministic. Only the one-hidden-layer MLP
without dropout (the paper's) takes this path; other shapes use plain autograd.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

DEFAULT_BLOCK = 256  # 256 x 1024 floats = 1 MB: stays in L2
GPU_BLOCK = 1 << 16


def _pre(a, a_idx, b, b_idx, r_w, r_rows):
    pre = F.embedding_bag(a_idx, a, mode="sum")
    pre += F.embedding_bag(b_idx, b, mode="sum")
    if r_w is not None:
        pre.addmm_(r_w, r_rows)
    return pre


class _TripleMLP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, a_idx, b, b_idx, r_w, rank1, w, bias, block):
        rank1 = tuple(rank1)
        r_rows = b[list(rank1)] if rank1 else None
        out = torch.empty(a_idx.shape[0], dtype=a.dtype, device=a.device)
        for s in range(0, a_idx.shape[0], block):
            e = min(s + block, a_idx.shape[0])
            pre = _pre(a, a_idx[s:e], b, b_idx[s:e], None if r_w is None else r_w[s:e], r_rows)
            torch.addmv(bias, pre.relu_(), w, out=out[s:e])
        ctx.save_for_backward(a, a_idx, b, b_idx, r_w, w, bias)
        ctx.rank1, ctx.block = rank1, block
        return out

    @staticmethod
    def backward(ctx, grad):
        a, a_idx, b, b_idx, r_w, w, bias = ctx.saved_tensors
        need_a, _, need_b, _, need_rw, _, need_w, need_bias, _ = ctx.needs_input_grad
        rank1 = list(ctx.rank1)
        r_rows = b[rank1] if rank1 else None
        grad = grad.contiguous()
        g_a = torch.zeros_like(a) if need_a else None
        g_b = torch.zeros_like(b) if need_b else None
        g_r = torch.zeros(len(rank1), b.shape[1], dtype=b.dtype, device=b.device) if rank1 else None
        g_rw = torch.zeros_like(r_w) if need_rw and r_w is not None else None
        g_w = torch.zeros_like(w)
        for s in range(0, a_idx.shape[0], ctx.block):
            e = min(s + ctx.block, a_idx.shape[0])
            rw = None if r_w is None else r_w[s:e]
            act = _pre(a, a_idx[s:e], b, b_idx[s:e], rw, r_rows).relu_()
            g = grad[s:e]
            # a [1, B] x [B, H] product, not addmv(act.t(), g): MKL's strict mode fixes a gemm's bits for
            # any thread count, while its transposed gemv splits the B sum by thread on AMX Xeons
            g_w.unsqueeze(0).addmm_(g.unsqueeze(0), act)
            g_pre = act.sign_().mul_(w).mul_(g.unsqueeze(1))  # relu' * w * g, in place (act >= 0)
            if g_a is not None:
                for j in range(a_idx.shape[1]):
                    g_a.index_add_(0, a_idx[s:e, j], g_pre)
            if g_b is not None:
                for j in range(b_idx.shape[1]):
                    g_b.index_add_(0, b_idx[s:e, j], g_pre)
                if g_r is not None:
                    g_r.addmm_(rw.t(), g_pre)
            if g_rw is not None:
                torch.mm(g_pre, r_rows.t(), out=g_rw[s:e])
        if g_b is not None and g_r is not None:
            g_b.index_add_(0, torch.tensor(rank1, device=b.device), g_r)
        g_bias = grad.sum().reshape(bias.shape) if need_bias else None
        return g_a, None, g_b, None, g_rw, None, (g_w if need_w else None), g_bias, None


def triple_mlp(
    a: torch.Tensor,
    a_idx: torch.Tensor,
    b: torch.Tensor,
    b_idx: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    rank1_w: torch.Tensor | None = None,
    rank1_rows: Sequence[int] = (),
    block: int = DEFAULT_BLOCK,
) -> torch.Tensor:
    """``[T]`` logits ``weight . relu(bag(a, a_idx) + bag(b, b_idx) + rank1_w @ b[rank1_rows]) + bias``.

    ``a [Ra, H]`` and ``b [Rb, H]`` are row tables, ``a_idx [T, ka]`` / ``b_idx [T, kb]`` the
    rows each triple sums; ``rank1_w [T, m]`` per-triple scalars multiplying the rows
    ``rank1_rows`` of ``b`` (e.g. cosine features times their weight columns); ``weight
    [H]`` and ``bias`` (one element) the output layer.
    """
    if a_idx.shape[0] != b_idx.shape[0]:
        raise ValueError(f"a_idx has {a_idx.shape[0]} triples, b_idx {b_idx.shape[0]}")
    if (rank1_w is None) != (not rank1_rows):
        raise ValueError("rank1_w and rank1_rows go together")
    if a.is_cuda and block == DEFAULT_BLOCK:
        block = GPU_BLOCK  # no cache to fit in; fewer, bigger kernels
    return _TripleMLP.apply(
        a, a_idx, b, b_idx, rank1_w, tuple(int(r) for r in rank1_rows), weight.reshape(-1), bias.reshape(()), block
    )
