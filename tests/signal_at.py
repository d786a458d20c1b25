"""Run a command script with a real signal sent to its own process at a chosen point.

    python -m tests.signal_at MODULE:QUALNAME N SIGNAL SCRIPT [ARGS...]

sends SIGNAL (KILL, TERM, INT, USR1, ...) to the process when MODULE:QUALNAME (a function, or a
method as Class.method) is called for the N-th time, just before the call runs, then goes on as
if nothing happened: what the process does next is the code under test's own handling. The
script runs as ``__main__`` exactly as ``python SCRIPT ARGS...`` would run it.
"""

from __future__ import annotations

import importlib
import os
import runpy
import signal
import sys


def arm(target: str, nth: int, signum: int) -> None:
    module_name, qualname = target.split(":")
    owner = importlib.import_module(module_name)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    calls = 0

    def wrapped(*args, **kwargs):
        nonlocal calls
        calls += 1
        if calls == nth:
            os.kill(os.getpid(), signum)
        return original(*args, **kwargs)

    setattr(owner, name, wrapped)


def main(argv: list[str]) -> None:
    target, nth, sig, script, *rest = argv
    arm(target, int(nth), getattr(signal, f"SIG{sig.upper()}"))
    sys.argv = [script, *rest]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
