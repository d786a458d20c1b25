"""The shared progress helper: same batches with or without a bar, bar only when worth it."""
from gsr_train.progress import batches, progress


def test_batches_cover_the_range_with_and_without_a_bar():
    for show in (False, True, None):
        assert list(batches(10, 4, show, "x")) == [(0, 4), (4, 8), (8, 10)]
    assert list(batches(0, 4, True, "x")) == []


def test_progress_is_silent_below_the_threshold(capsys):
    with progress(5, "quiet", threshold=10) as advance:
        advance(5)
    assert "quiet" not in capsys.readouterr().out
    with progress(5, "loud", show=True) as advance:
        advance(5)
    assert "loud" in capsys.readouterr().out
