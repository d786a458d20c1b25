"""Shared by the benchmark scripts (run as ``python bench/NAME.py``, so this folder is on sys.path)."""

from __future__ import annotations

import resource
import time
from pathlib import Path


def best_time(fn, repeat: int):
    """Fastest of ``repeat`` calls of ``fn`` (seconds) and the last call's result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MB), the figure every benchmark prints."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def save_figures(out: str | Path, doc: dict) -> None:
    """The benchmark's figures as JSON next to its table (atomic: a killed run leaves the old file)."""
    from gsr_train.io import write_json

    write_json(out, doc, indent=1)
    print(f"wrote {out}")
