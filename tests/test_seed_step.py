"""`seed_step`: each training step's seeding draws what ``torch.manual_seed`` would, without its lazy
seeding of CUDA, XPU and MTIA (a formatted Python stack each, every step of a CPU run)."""

from __future__ import annotations

import pytest
import torch

from gsr_train.models.edge_scorer import seed_step


def test_a_cpu_step_draws_what_manual_seed_draws_without_calling_it(monkeypatch):
    torch.manual_seed(12345)
    expected = (torch.rand(5), torch.randn(3, 2), torch.randperm(9))

    def refuse(seed):
        raise AssertionError("a CPU step seeds only the CPU generator")

    monkeypatch.setattr(torch, "manual_seed", refuse)
    seed_step(12345, torch.device("cpu"))
    got = (torch.rand(5), torch.randn(3, 2), torch.randperm(9))
    assert all(torch.equal(a, b) for a, b in zip(expected, got))


@pytest.mark.parametrize("seed", [0, (7 * 1_000_003 + 41) % (1 << 63)])
def test_each_seed_gives_its_own_draws(seed):
    seed_step(seed, torch.device("cpu"))
    first = torch.rand(4)
    seed_step(seed + 1, torch.device("cpu"))
    assert not torch.equal(first, torch.rand(4))
    seed_step(seed, torch.device("cpu"))
    assert torch.equal(first, torch.rand(4))
