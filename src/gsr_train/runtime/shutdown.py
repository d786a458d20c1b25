"""A command's process ends without the interpreter's last full garbage collection.

At exit CPython runs one more collection over every object before it frees the modules. With
torch, Lightning and transformers loaded (about 5,000 modules, millions of objects) that pass
alone took 2.5 s of every command's wall time, a run's and a refusal's alike
(``bench/bench_startup.py``, the ``exit`` rows). The process ends there, so the pass buys
nothing: the files a command writes are closed by the code that opened them
(`gsr_train.io.atomic_write`, ``with`` blocks), logging's handlers are flushed by logging's own
exit hook, temporary folders are removed by ``weakref.finalize``, and those hooks all still run.

`install` registers ``gc.freeze`` as an exit hook. Registered at the start of a command, it runs
after every hook registered later, so what it freezes is left to the operating system. Only the
commands call it (``train.py``, ``eval.py``, ``gsr-train``): a process that imports gsr_train as
a library keeps Python's own shutdown.
"""

from __future__ import annotations

import atexit
import gc

_INSTALLED: list[bool] = []


def install() -> None:
    """Skip the last collection when this process exits (idempotent)."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    atexit.register(gc.freeze)
