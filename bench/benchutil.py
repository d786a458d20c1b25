"""Shared by the benchmark scripts (run as ``python bench/NAME.py``, so this folder is on sys.path)."""
from __future__ import annotations

import time


def best_time(fn, repeat: int):
    """Fastest of ``repeat`` calls of ``fn`` (seconds) and the last call's result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out
