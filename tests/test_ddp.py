"""Two-process DDP on CPU (gloo, ``ddp_spawn``) against one process with the same global batch.

For every model kind in ``tests/scale_helpers.KINDS``: one epoch with per-device batch B on
2 processes vs batch 2B on 1 process, from the same initial weights. The per-step global
loss and the final weights must agree within float tolerance, and the validation metrics
logged under DDP must equal the metrics of the final weights over the *whole* validation
split (each rank only sees half of it: this checks the cross-rank merge).
"""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import pytorch_lightning as pl
import torch

from .conftest import quiet
from .scale_helpers import KINDS, LossRecorder, fit_on_cpu, make_datamodule

BATCH = 4  # per device
STRATEGY = "ddp_fork"


pytestmark = [pytest.mark.usefixtures("one_thread", "cpu_ranks"), pytest.mark.integration]


@pytest.fixture
def cpu_ranks(monkeypatch):
    """CPU ranks forked from this process must not touch CUDA: where a GPU is visible and an earlier
    test initialised it here, a forked rank cannot (Lightning would save its CUDA RNG state)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _fit(kind: str, ctx: dict, module, root, devices: int, batch: int):
    recorder = LossRecorder(root / "losses.json")
    options = {"devices": devices, "strategy": STRATEGY if devices > 1 else "auto", "enable_checkpointing": False}
    trainer = fit_on_cpu(kind, ctx, module, root, batch, 1, [recorder], **options)
    losses = json.loads((root / "losses.json").read_text())
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    return losses, metrics


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_two_process_ddp_matches_single_process(kind, tmp_path):
    spec = KINDS[kind]
    ctx = spec["setup"](tmp_path)
    pl.seed_everything(0)
    base = spec["module"](ctx)
    single, ddp = copy.deepcopy(base), copy.deepcopy(base)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    loss_1, val_1 = _fit(kind, ctx, single, tmp_path / "one", devices=1, batch=2 * BATCH)
    loss_2, val_2 = _fit(kind, ctx, ddp, tmp_path / "two", devices=2, batch=BATCH)

    # same number of optimiser steps and the same loss trajectory
    assert len(loss_1) == len(loss_2) >= 3
    assert loss_1 == pytest.approx(loss_2, rel=1e-4, abs=1e-5)
    assert loss_1[-1] < loss_1[0]  # it trained

    # same final weights (ddp_spawn copies rank 0's weights back into `ddp`)
    w1, w2, w0 = spec["weights"](single), spec["weights"](ddp), spec["weights"](base)
    assert w1.keys() == w2.keys()
    for name in w1:
        assert torch.allclose(w1[name], w2[name], rtol=1e-4, atol=1e-5), name
    assert any(not torch.equal(w0[n], w2[n]) for n in w0)

    # validation under DDP covers every validation question
    # (counts are exact; a loss differs by float rounding: other batch shapes / padding)
    ref = spec["val_reference"](ctx, ddp)
    assert ref
    for name, value in ref.items():
        assert val_2[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
    for name in ref:
        assert val_1[name] == pytest.approx(val_2[name], rel=1e-4, abs=1e-6), name
    assert any(
        0.0 < v < 1.0 for k, v in ref.items() if "match@n" in k or "recall" in k or "accuracy" in k
    )  # informative, not 0 or 1


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_modules_and_datamodules_pickle_for_ddp_spawn(kind, tmp_path):
    """``strategy=ddp_spawn`` (trainer=ddp_cpu) pickles the module and the data module to the ranks."""
    import pickle

    spec = KINDS[kind]
    ctx = spec["setup"](tmp_path)
    module = spec["module"](ctx)
    dm = make_datamodule(kind, ctx, BATCH, module=module)
    module2, dm2 = pickle.loads(pickle.dumps((module, dm)))
    w1, w2 = spec["weights"](module), spec["weights"](module2)
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    assert type(dm2) is type(dm)


def test_rank_sampler_shards_the_single_process_order():
    from gsr_train.datamodules.triple_datamodule import RankSampler

    one = RankSampler(10, seed=3, num_replicas=1, rank=0)
    ranks = [RankSampler(10, seed=3, num_replicas=2, rank=r) for r in (0, 1)]
    for s in [one, *ranks]:
        s.set_epoch(4)
    order = list(one)
    assert sorted(order) == list(range(10)) and order != list(range(10))
    assert list(ranks[0]) == order[0::2] and list(ranks[1]) == order[1::2]
    ranks[1].skip = 2  # mid-epoch resume: the first two items of this rank's shard were trained on
    assert list(ranks[1]) == order[1::2][2:] and list(ranks[1]) == order[1::2]  # skip applies once


def test_reader_run_with_two_ddp_processes_matches_one(tmp_path):
    """runs/reader.py with ``trainer=ddp_cpu`` (2 forked ranks, 2 examples each) trains the same adapter
    as one process with batch 4 (the loss is the mean over the global batch's answer tokens)."""
    from gsr_train.runs.experiment import run_experiment

    from .scale_helpers import reader_adapter, reader_run_config, reader_run_inputs

    inputs = reader_run_inputs(tmp_path)
    one, two = tmp_path / "one", tmp_path / "two"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_experiment(reader_run_config(inputs, one, "qa.train.epochs=1", "qa.train.batch_size=4"))
        # the same recipe (a global batch of 4: batch_scope=global gives each rank 2)
        run_experiment(
            reader_run_config(
                inputs,
                two,
                "qa.train.epochs=1",
                "qa.train.batch_size=4",
                "trainer=ddp_cpu",
                "trainer.strategy=ddp_fork",
            )
        )  # ddp_spawn: the same, 20 s slower
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (one, two))
    assert a["train"]["devices"] == 1 and b["train"]["devices"] == 2
    assert a["train"]["steps"] == b["train"]["steps"] == 2  # 6 examples: 4 + 2 per step
    wa, wb = reader_adapter(one), reader_adapter(two)
    assert wa.keys() == wb.keys() and wa
    for name in wa:
        assert torch.allclose(wa[name], wb[name], rtol=1e-4, atol=1e-6), name
    assert any(float(v.abs().max()) > 0 for n, v in wb.items() if "lora_B" in n)  # it trained
    assert a["metrics"]["finetuned_retrieved"]["all"]["n"] == b["metrics"]["finetuned_retrieved"]["all"]["n"] == 3


def test_reader_run_writes_nothing_on_other_ranks(tmp_path, monkeypatch):
    """``strategy=ddp`` re-runs the whole script on every rank: ranks > 0 train, then return without
    scoring or writing results (Lightning itself writes checkpoints from rank 0 only)."""
    import gsr_train.runs.reader as reader_run
    from gsr_train.runs.experiment import run_experiment

    from .scale_helpers import reader_run_config, reader_run_inputs

    inputs = reader_run_inputs(tmp_path)
    out = tmp_path / "rank1"
    monkeypatch.setattr(reader_run, "is_rank_zero", lambda: False)
    cfg = reader_run_config(
        inputs,
        out,
        "qa.train.epochs=1",
        "qa.train.batch_size=4",
        "qa.eval.variants.base=[none]",
        "qa.merge=true",
        "~callbacks.step_checkpoint",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert run_experiment(cfg) == 0.0
    written = {p.name for p in out.iterdir()} if out.exists() else set()
    assert not written & {
        "metrics.json",
        "qa_table.txt",
        "adapter",
        "merged",
        "results_train.jsonl.gz",
        "results_test.jsonl.gz",
    }, written
    assert not [n for n in written if n.startswith("predictions_")], written


@pytest.mark.slow
def test_ddp_run_keeps_the_recipe_global_batch(tmp_path):
    """``train.py`` with 2 processes (``trainer=ddp_cpu``) trains the recipe one process trains
    (``batch_scope=global``: each takes half the batch): the same optimiser steps and the same
    recall within noise; ``batch_scope=per_device`` is the old behaviour, half the steps."""
    from .conftest import REPO, offline_env, run_train
    from .subgraphrag_toy import toy_quickstart_args, write_toy

    data = write_toy(tmp_path / "data", sizes=(48, 16, 32))
    env = offline_env(tmp_path / "cache", quiet=True)

    def train(name, *extra):
        done = run_train(
            [
                *toy_quickstart_args(data, epochs=4, graphs_per_batch=8),
                "model.train.patience=null",
                "subgraphrag.compare_cosine=false",
                *quiet(),
                f"hydra.run.dir={tmp_path / name}",
                *extra,
            ],
            REPO,
            env,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads((tmp_path / name / "metrics.json").read_text())

    one, two = train("one"), train("two", "trainer=ddp_cpu")
    assert one["training"]["devices"] == 1 and two["training"]["devices"] == 2
    assert one["training"]["global_step"] == two["training"]["global_step"] == 4 * 48 // 8
    for metric in ("answer_recall", "sp_recall"):
        assert two["at_k"][metric] == pytest.approx(one["at_k"][metric], abs=0.1), (metric, one["at_k"], two["at_k"])
    per_device = train("per_device", "trainer=ddp_cpu", "batch_scope=per_device")
    assert per_device["training"]["global_step"] == 4 * 48 // 16  # each process took all 8: half the steps


@pytest.mark.parametrize(
    ("variable", "value", "zero"), [("SLURM_PROCID", "1", False), ("RANK", "0", True), (None, None, True)]
)
def test_rank_zero_without_lightnings_rank_reads_every_launchers_variable(monkeypatch, variable, value, zero):
    """Before Lightning sets its rank, ``is_rank_zero`` reads the same variables as the run folder's
    ``process_rank`` (a SLURM task > 0 is not rank 0)."""
    from lightning_fabric.utilities.rank_zero import rank_zero_only

    from gsr_train.runtime.run_folder import RANK_VARIABLES
    from gsr_train.runtime.training import is_rank_zero

    monkeypatch.delattr(rank_zero_only, "rank", raising=False)
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    if variable:
        monkeypatch.setenv(variable, value)
    assert is_rank_zero() is zero
