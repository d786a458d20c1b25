"""One rich progress bar for long loops (embedding, scoring, decoding): shown only when worth it."""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator


@contextlib.contextmanager
def progress(total: int, description: str, show: bool | None = None, threshold: int = 0,
             done: int = 0, transient: bool = False) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``; a bar appears when ``show`` is true, or (``show=None``) when more
    than ``threshold`` units of work remain. Without a bar ``advance`` does nothing."""
    if not (show if show is not None else total - done > threshold):
        yield lambda n=1: None
        return
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), transient=transient) as bar:
        task = bar.add_task(description, total=total, completed=done)
        yield lambda n=1: bar.advance(task, n)


def batches(n: int, batch_size: int, show: bool | None, description: str, threshold: int = 8):
    """``(start, end)`` bounds of ``n`` items in batches, with a (transient) bar for many batches."""
    bounds = [(s, min(s + batch_size, n)) for s in range(0, n, batch_size)]
    with progress(len(bounds), description, show, threshold, transient=True) as advance:
        for b in bounds:
            yield b
            advance(1)
