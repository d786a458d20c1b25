"""The shared progress helper: same batches with or without a bar, bar only when worth it,
periodic log lines with an ETA when there is no terminal (cluster jobs)."""
import logging
import sys

import gsr_train.progress as progress_module
from gsr_train.progress import batches, progress


def test_batches_cover_the_range_with_and_without_a_bar():
    for show in (False, True, None):
        assert list(batches(10, 4, show, "x")) == [(0, 4), (4, 8), (8, 10)]
    assert list(batches(0, 4, True, "x")) == []


def test_progress_is_silent_below_the_threshold(capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with progress(5, "quiet", threshold=10) as advance:
        advance(5)
    assert "quiet" not in capsys.readouterr().out
    with progress(5, "loud", show=True) as advance:
        advance(5)
    assert "loud" in capsys.readouterr().out


def test_without_a_terminal_progress_is_logged_with_an_eta(caplog, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setattr(progress_module, "LOG_EVERY_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger="gsr_train.progress"):
        with progress(400, "entity texts", show=True, done=100) as advance:
            advance(100)
            advance(200)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("entity texts: 200/400 (50.0%)") and "ETA" in lines[0]
    assert lines[-1].startswith("entity texts: 400/400 (100.0%)") and "ETA 0:00:00" in lines[-1]
