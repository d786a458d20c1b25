"""CPU numerics: what a figure depends on besides the config, the data and the seed.

Two things move the last bits of a CPU computation without changing its config:

* **the thread count.** MKL's matrix products on some CPUs (AVX-512 / AMX Xeons) split a product's
  inner dimension across threads, so 1 and 2 threads round differently. MKL's conditional numerical
  reproducibility mode ``MKL_CBWR=AUTO,STRICT`` makes them independent of the thread count at the
  same speed, and `pin_cpu_numerics` sets it whenever the process has not. The text encoders
  go further: they compute on exactly one intra-op thread (`intra_op_threads`) and spread
  work over forked processes, so their vectors are the same bytes for any worker count on any CPU.
  (torch's own full reductions, such as a loss's mean, still sum in one chunk per thread: a logged
  loss may differ in its last bit with the thread count; its gradients and the figures do not.)
* **the instruction set.** MKL, oneDNN and torch's vectorised kernels each pick their code for the
  CPU they run on (AVX2, AVX-512, AMX), and the code rounds differently. ``GSR_TRAIN_NUMERICS=
  portable`` pins all three (and numba's code generation) to their AVX2-or-below paths, so every
  x86-64 CPU with AVX2 computes the same bytes; it costs about 1.5x CPU time on the quickstart,
  so it is an option, not the default (``native``).

This module runs first when ``gsr_train`` is imported, before torch has computed anything: the
libraries read these variables on their first use. A variable the user has set is kept.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator, MutableMapping

ENV = "GSR_TRAIN_NUMERICS"
MODES = ("native", "portable")
# Thread-count independence at the same speed (measured: matrix products within 3% of the default).
NATIVE = {"MKL_CBWR": "AUTO,STRICT"}
# The same bytes on every x86-64 CPU with AVX2: MKL's compatible code path, torch's AVX2 kernels,
# oneDNN's AVX2 code and numba's code for the Haswell generation.
PORTABLE = {
    "MKL_CBWR": "COMPATIBLE,STRICT",
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "NUMBA_CPU_NAME": "haswell",
}
# The variables that choose instruction sets; a test sets them to emulate another CPU.
ISA_VARIABLES = ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "NUMBA_CPU_NAME")


def numerics_mode(environ: MutableMapping[str, str] = os.environ) -> str:
    """The mode ``GSR_TRAIN_NUMERICS`` asks for (``native`` when unset)."""
    return environ.get(ENV, "").strip().lower() or "native"


def mode_error(environ: MutableMapping[str, str] = os.environ) -> str | None:
    """One line for a ``GSR_TRAIN_NUMERICS`` value that is no mode, else ``None`` (the runs' preflight
    reports it before any work; the import itself never fails on it and pins nothing)."""
    mode = numerics_mode(environ)
    if mode in MODES:
        return None
    return f"{ENV}={environ.get(ENV)!r} is not a numerics mode: use one of {', '.join(MODES)}"


def pin_cpu_numerics(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set the variables of the mode in force where the user has not set them; what it set."""
    if platform.machine().lower() not in ("x86_64", "amd64") or mode_error(environ):
        return {}  # MKL, oneDNN's ISA names and the AVX2 pin are x86-64 things
    wanted = PORTABLE if numerics_mode(environ) == "portable" else NATIVE
    pinned = {key: value for key, value in wanted.items() if key not in environ}
    environ.update(pinned)
    return pinned


def numerics_record() -> dict[str, str]:
    """What ``metrics.json`` says of the CPU numerics behind its figures."""
    import torch

    record = {"mode": numerics_mode(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    record.update({key: os.environ[key] for key in ("MKL_CBWR", *ISA_VARIABLES) if key in os.environ})
    return record


@contextlib.contextmanager
def intra_op_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` for the block, then back (``None``: untouched)."""
    import torch

    before = torch.get_num_threads()
    if threads is None or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
