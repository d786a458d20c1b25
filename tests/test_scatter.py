"""`gsr_train.arrays.scatter` gives PyG's ``scatter`` bits, so every figure computed with it is the
one computed before it replaced PyG's (whose import costs seconds at the start of every command)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch_geometric.utils import scatter as pyg_scatter

from gsr_train.arrays import scatter

CASES = [  # (shape of src, dim, dtype)
    ((1000,), 0, torch.float32),
    ((1000,), 0, torch.float64),
    ((1000,), 0, torch.int64),
    ((500, 7), 0, torch.float32),
    ((7, 500), 1, torch.float32),
    ((7, 500), -1, torch.float32),
    ((3, 400, 5), 1, torch.float32),
]


@pytest.mark.parametrize("reduce", ["sum", "mean", "min", "max"])
@pytest.mark.parametrize(("shape", "dim", "dtype"), CASES)
def test_the_same_bits_as_pyg(shape, dim, dtype, reduce):
    g = torch.Generator().manual_seed(len(shape) * 31 + dim)
    src = torch.randn(shape, generator=g, dtype=torch.float64) * 1e3
    src = src.to(dtype)
    length = src.size(dim)
    index = torch.randint(0, 40, (length,), generator=g)
    for dim_size in (None, 60):  # 60: slots that receive nothing stay 0
        ours = scatter(src, index, dim, dim_size=dim_size, reduce=reduce)
        theirs = pyg_scatter(src, index, dim, dim_size=dim_size, reduce=reduce)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        assert torch.equal(ours, theirs), (shape, dim, dtype, reduce, dim_size)


def test_gradients_match_pyg():
    src = torch.randn(300, 4, dtype=torch.float64, requires_grad=True)
    index = torch.randint(0, 20, (300,))
    for reduce in ("sum", "mean", "max"):
        (ours,) = torch.autograd.grad(scatter(src, index, 0, 25, reduce).pow(2).sum(), src)
        (theirs,) = torch.autograd.grad(pyg_scatter(src, index, 0, 25, reduce).pow(2).sum(), src)
        assert torch.equal(ours, theirs), reduce


def test_empty_index_and_bad_arguments():
    assert scatter(torch.zeros(0), torch.zeros(0, dtype=torch.long)).shape == (0,)
    assert torch.equal(scatter(torch.zeros(0), torch.zeros(0, dtype=torch.long), dim_size=3), torch.zeros(3))
    with pytest.raises(ValueError, match="one-dimensional"):
        scatter(torch.zeros(4), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="reduce='mul'"):
        scatter(torch.zeros(4), torch.zeros(4, dtype=torch.long), reduce="mul")


def test_a_run_imports_no_pyg():
    """What train.py and eval.py import to run any experiment leaves PyG out (GNN-RAG, the one
    built-in that needs it, is imported when it is asked for)."""
    code = (
        "import sys, gsr_train.runs.runners, gsr_train.runs.evaluate_run\n"
        "from gsr_train.retrievers import registry\n"
        "assert 'gnn-rag' in registry.names()\n"
        "print('torch_geometric' in sys.modules)\n"
        "registry.trainable('gnn-rag')\n"
        "print('torch_geometric' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"]
