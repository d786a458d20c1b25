"""CPU allocator tuning for training / scoring loops that allocate big temporaries.

Each step allocates and frees tensors of tens of MB (``[triples, hidden]``). glibc hands
allocations above its mmap threshold straight back to the kernel on ``free``, so every
step page-faults the same memory in again; on virtual machines a page fault is expensive
(measured here: allocating and zeroing a 70 MB tensor took 4-5x longer than zeroing an
existing one). :func:`keep_freed_memory` raises glibc's mmap and trim thresholds so freed
blocks are reused. The thresholds stay moderate (128 MB / 512 MB): a split-sized array
(hundreds of MB on CWQ) still goes back to the kernel when freed, so one peak does not
stay resident for the rest of a run. It only changes how memory is recycled, never results, and is a no-op
off glibc. (Alternatives: ``THP_MEM_ALLOC_ENABLE=1``, jemalloc / tcmalloc via LD_PRELOAD.)
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_done = False


def keep_freed_memory(mmap_threshold: int = 1 << 27, trim_threshold: int = 1 << 29, top_pad: int = 1 << 26) -> bool:
    """Ask glibc to keep freed memory for reuse; returns whether it took effect (once per process)."""
    global _done
    if _done:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = all(mallopt(opt, value) == 1 for opt, value in (
        (_M_MMAP_THRESHOLD, mmap_threshold), (_M_TRIM_THRESHOLD, trim_threshold), (_M_TOP_PAD, top_pad)))
    _done = ok
    log.debug("glibc mallopt thresholds raised: %s", ok)
    return ok
