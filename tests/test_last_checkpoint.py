"""``checkpoints/last.ckpt`` is the newest state of a run, also when the last epochs do not
improve the monitored metric (Lightning's own ``save_last`` then keeps an older state)."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from gsr_train.runtime.checkpoints import LastCheckpoint
from gsr_train.runtime.training import make_trainer

from .conftest import compose_config


class Worsening(pl.LightningModule):
    """A model whose validation metric is best after the first epoch and then only falls."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(3))

    def training_step(self, batch, _):
        (x,) = batch
        return ((x - self.w) ** 2).mean()

    def validation_step(self, batch, _):
        self.log("val/m", -float(self.current_epoch), on_epoch=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader(n=8):
    return DataLoader(TensorDataset(torch.randn(n, 3)), batch_size=2)


def _cfg(tmp_path, every=500, *extra):
    return compose_config(
        [
            "+experiment=subgraphrag_quickstart",
            f"paths.output_dir={tmp_path}",
            f"checkpoint_every_n_steps={every}",
            "logger=none",
            *extra,
        ]
    )


def _run(tmp_path, cfg, module, epochs=4, validate=True, early_stop=False):
    best = ModelCheckpoint(
        dirpath=tmp_path / "checkpoints",
        filename="best",
        monitor="val/m",
        mode="max",
        save_last=True,
        enable_version_counter=False,
    )  # Lightning's own save_last too
    callbacks = [best] + ([EarlyStopping(monitor="val/m", mode="max", patience=1)] if early_stop else [])
    trainer = make_trainer(
        cfg,
        callbacks=callbacks,
        max_epochs=epochs,
        enable_progress_bar=False,
        **({} if validate else {"limit_val_batches": 0}),
    )
    trainer.fit(module, _loader(), _loader() if validate else None)
    return trainer, best


@pytest.mark.parametrize("early_stop", [False, True])
def test_last_ckpt_holds_the_final_weights_when_late_epochs_do_not_improve(tmp_path, early_stop):
    module = Worsening()
    trainer, best = _run(tmp_path, _cfg(tmp_path), module, early_stop=early_stop)
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == trainer.global_step == (8 if early_stop else 16)  # 4 steps per epoch
    assert torch.equal(last["state_dict"]["w"], module.w.detach())
    assert torch.load(best.best_model_path, weights_only=False)["global_step"] == 4  # epoch 0 stays the best


def test_last_ckpt_without_validation_and_between_step_checkpoints(tmp_path):
    module = Worsening()
    trainer, _ = _run(tmp_path, _cfg(tmp_path, every=3), module, epochs=2, validate=False)  # 8 steps: 3, 6, then end
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == trainer.global_step == 8
    assert torch.equal(last["state_dict"]["w"], module.w.detach())


def test_every_trainer_gets_one_last_checkpoint_even_without_the_config_entry(tmp_path):
    cfg = _cfg(tmp_path, 500, "~callbacks.step_checkpoint")
    assert "step_checkpoint" not in cfg.callbacks
    trainer = make_trainer(cfg, max_epochs=1)
    assert sum(isinstance(c, LastCheckpoint) for c in trainer.callbacks) == 1
    trainer = make_trainer(_cfg(tmp_path), max_epochs=1)
    assert sum(isinstance(c, LastCheckpoint) for c in trainer.callbacks) == 1


def test_training_logs_progress_and_eta_without_a_terminal(tmp_path, caplog, monkeypatch):
    import sys

    from gsr_train.runtime.log_progress import TrainingLogProgress

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    cfg = _cfg(tmp_path)
    trainer = make_trainer(cfg, max_epochs=2, enable_progress_bar=False)
    progress = [c for c in trainer.callbacks if isinstance(c, TrainingLogProgress)]
    assert len(progress) == 1
    progress[0].every = 0.0  # a line for every step (the default is every 30 s)
    with caplog.at_level("INFO", logger="gsr_train.progress"):
        trainer.fit(Worsening(), _loader(), _loader())
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("train (epoch")]
    assert lines[0].startswith("train (epoch 1/2): 1/8 (12.5%)") and "ETA" in lines[0]
    assert lines[-1].startswith("train (epoch 2/2): 8/8 (100.0%)")


@pytest.mark.parametrize("terminal", [True, False])
def test_the_live_bar_only_on_a_terminal(tmp_path, monkeypatch, terminal):
    """On a terminal the rich bar; in a log file the progress lines alone: the bar draws nothing there
    and its refresh thread took about 5% of a CPU training run."""
    import sys

    from pytorch_lightning.callbacks import ProgressBar

    from gsr_train.runtime.log_progress import EpochBar, TrainingLogProgress

    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal, raising=False)
    trainer = make_trainer(_cfg(tmp_path), max_epochs=1)  # callbacks.rich_progress: the EpochBar
    bars = [c for c in trainer.callbacks if isinstance(c, ProgressBar)]
    logged = [c for c in trainer.callbacks if isinstance(c, TrainingLogProgress)]
    assert (len(bars), len(logged)) == ((1, 0) if terminal else (0, 1))
    assert all(isinstance(b, EpochBar) for b in bars) and trainer.progress_bar_callback is (bars[0] if bars else None)
