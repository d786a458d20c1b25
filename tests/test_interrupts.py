"""Stop signals whose exception Python drops: the run finishes, and says so."""

from __future__ import annotations

import json
import signal

import pytest
from omegaconf import OmegaConf

from gsr_train.runs.experiment import _run_and_mark
from gsr_train.runtime.interrupts import INTERRUPTS


class _Finalised:
    """Raises the run's stop from a finaliser, where Python prints "Exception ignored" and goes on."""

    def __del__(self) -> None:
        INTERRUPTS.handle(signal.SIGTERM)


def _runner(_cfg):
    _Finalised()  # collected at once: the handler's exception is dropped
    return "done"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped exception
def test_a_stop_whose_exception_was_dropped_is_named_when_the_run_finishes(tmp_path, caplog):
    assert INTERRUPTS.install()
    try:
        result = _run_and_mark(_runner, OmegaConf.create({}), tmp_path, "probe")
    finally:
        INTERRUPTS.uninstall()
    assert result == "done"
    assert "SIGTERM arrived but did not stop the run, which has finished" in caplog.text
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "finished"
