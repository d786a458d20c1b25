"""CPU allocator tuning for training / scoring loops that allocate big temporaries.

Each step allocates and frees tensors of tens of MB (``[triples, hidden]``). glibc hands
allocations above its mmap threshold straight back to the kernel on ``free``, so every
step page-faults the same memory in again; on virtual machines a page fault is expensive
(measured here: allocating and zeroing a 70 MB tensor took 4-5x longer than zeroing an
existing one). `keep_freed_memory` raises glibc's mmap and trim thresholds so freed
blocks are reused. The thresholds stay moderate (128 MB / 512 MB): a split-sized array
(hundreds of MB on CWQ) still goes back to the kernel when freed, so one peak does not
stay resident for the rest of a run. It only changes how memory is recycled, never results, and is a no-op
off glibc; the switch lives in `gsr_train.memory`. (Alternatives: ``THP_MEM_ALLOC_ENABLE=1``,
jemalloc / tcmalloc via LD_PRELOAD.)
"""

from __future__ import annotations

from gsr_train.memory import keep_freed_memory

__all__ = ["keep_freed_memory"]
