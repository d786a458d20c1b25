"""One rich progress bar for long loops (embedding, scoring, decoding): shown only when worth it.

Without a terminal (a cluster job writing to a log file) a live bar shows nothing until it
ends, so there the same loops log a line every ``LOG_EVERY_SECONDS`` instead: done / total,
rate and the time left.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

log = logging.getLogger(__name__)
LOG_EVERY_SECONDS = 30.0


def rate_text(per_second: float, unit: str = "step") -> str:
    """``12/s`` at one or more per second, ``3.4 s/step`` below (``0/s`` says nothing)."""
    if per_second >= 1 or per_second <= 0:
        return f"{per_second:.0f}/s"
    return f"{1 / per_second:.1f} s/{unit}"


def _duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class LogProgress:
    """``advance(n)`` that logs progress and ETA at most every ``every`` seconds."""

    def __init__(self, total: int, description: str, done: int = 0, every: float = LOG_EVERY_SECONDS) -> None:
        self.total, self.description, self.done, self.every = total, description, done, every
        self.start_done, self.t0 = done, time.monotonic()
        self.last = self.t0

    def __call__(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last < self.every and self.done < self.total:
            return
        self.last = now
        rate = (self.done - self.start_done) / max(now - self.t0, 1e-9)
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        log.info(
            "%s: %d/%d (%.1f%%), %s, elapsed %s, ETA %s",
            self.description,
            self.done,
            self.total,
            100.0 * self.done / max(self.total, 1),
            rate_text(rate),
            _duration(now - self.t0),
            _duration(left) if left != float("inf") else "?",
        )


@contextlib.contextmanager
def progress(
    total: int, description: str, show: bool | None = None, threshold: int = 0, done: int = 0, transient: bool = False
) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``; a bar appears when ``show`` is true, or (``show=None``) when more
    than ``threshold`` units of work remain. Without a bar ``advance`` does nothing."""
    if not (show if show is not None else total - done > threshold):

        def nothing(n: int = 1) -> None:
            return None

        yield nothing
        return
    if not sys.stderr.isatty():  # a log file: periodic lines, not a live bar
        yield LogProgress(total, description, done, LOG_EVERY_SECONDS)
        return

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        transient=transient,
    ) as bar:
        task = bar.add_task(description, total=total, completed=done)

        def advance(n: int = 1) -> None:
            bar.advance(task, n)

        yield advance


def batches(n: int, batch_size: int, show: bool | None, description: str, threshold: int = 8):
    """``(start, end)`` bounds of ``n`` items in batches, with a (transient) bar for many batches."""
    bounds = [(s, min(s + batch_size, n)) for s in range(0, n, batch_size)]
    with progress(len(bounds), description, show, threshold, transient=True) as advance:
        for b in bounds:
            yield b
            advance(1)
