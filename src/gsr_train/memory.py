"""Resident memory of this process, and glibc's policy for freed memory.

glibc keeps freed blocks below its mmap threshold on its heaps for reuse. That is what a
loop of same-sized allocations wants (`keep_freed_memory`: SubgraphRAG's training and scoring,
every triple scorer's scoring, GSR's training steps and beam search, whose logits over the
vocabulary are tens of MB: 26 of the GSR quickstart's 95 s went to page faults without it; the
text encoders' batches),
and the opposite of what training with batches of varying shapes wants: blocks of every size
pile up on the heaps and resident memory climbs step after step (`return_freed_memory`
sends every large block back to the OS when freed). Both are process-wide settings.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import resource
from typing import Any

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_policy: str | None = None
_kept: tuple[int, int, int] = (0, 0, 0)  # the thresholds keep_freed_memory set
_libc: Any = None  # libc, once loaded (False where there is no malloc_trim)


def rss_mb() -> float:
    """Current resident set size (MB), from /proc (0.0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * resource.getpagesize() / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _mallopt(settings) -> bool:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(opt, value) == 1 for opt, value in settings)


def keep_freed_memory(mmap_threshold: int = 1 << 27, trim_threshold: int = 1 << 29, top_pad: int = 1 << 26) -> bool:
    """Keep freed blocks up to ``mmap_threshold`` for reuse (repeated same-sized work). Under this
    policy already, a call asking for larger thresholds raises them (one that asks for less leaves
    them): the largest blocks any caller repeats stay reusable."""
    global _policy, _kept
    wanted = (mmap_threshold, trim_threshold, top_pad)
    if _policy == "keep":
        wanted = (max(wanted[0], _kept[0]), max(wanted[1], _kept[1]), max(wanted[2], _kept[2]))
        if wanted == _kept:
            return True
    ok = _mallopt(zip((_M_MMAP_THRESHOLD, _M_TRIM_THRESHOLD, _M_TOP_PAD), wanted))
    if ok:
        _policy, _kept = "keep", wanted
    log.debug("glibc: keep freed memory (%s)", ok)
    return ok


def return_freed_memory(mmap_threshold: int = 1 << 20, trim_threshold: int = 1 << 22) -> bool:
    """Serve blocks above ``mmap_threshold`` by mmap (returned to the OS when freed) and trim the
    heap top above ``trim_threshold``: flat memory across batches of varying shapes."""
    global _policy
    if _policy == "return":
        return True
    ok = _mallopt(((_M_MMAP_THRESHOLD, mmap_threshold), (_M_TRIM_THRESHOLD, trim_threshold), (_M_TOP_PAD, 0)))
    if ok:
        _policy = "return"
        try:
            ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass
    log.debug("glibc: return freed memory (%s)", ok)
    return ok


def trim_freed_memory() -> bool:
    """Give the free pages of every glibc heap back to the OS now (``malloc_trim``), whatever the
    policy. Worker threads allocate from heaps of their own, which otherwise keep the high-water
    mark of each: a build with several workers trims after every batch it writes to stay at the
    memory of a one-worker build."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc.malloc_trim  # noqa: B018  (present: glibc)
        except (OSError, AttributeError):
            _libc = False
    return bool(_libc) and bool(_libc.malloc_trim(0))
