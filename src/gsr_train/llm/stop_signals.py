"""A stop signal (Ctrl-C, ``kill``, a scheduler's preemption) ends a batch of requests at once.

A run's stop-signal handler raises (`gsr_train.runtime.interrupts.RunInterrupted`), and a raise
from a signal handler happens wherever the main thread is. While requests are asked that is
mostly inside asyncio, which keeps it from the caller:

* in one of the loop's callbacks (a socket's read, a future's wake-up) asyncio logs it ("Fatal
  read error on socket transport") and goes on;
* in a weakref callback or a finaliser Python prints "Exception ignored" and drops it;
* in one request's task, ``gather`` holds it until every other request is answered.

The job then ran to its end and the stopped run left with status 0. So while a batch runs,
`StopSignals` takes the process's Python-level stop handlers and calls them from the event loop
itself; what they raise there cancels the job and is raised by the job.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from types import TracebackType
from typing import Any

# The process's stop signals (a run's handler: `gsr_train.runtime.interrupts`). SIGUSR1: Lightning's and
# SLURM's usual `--signal=USR1@90`; SIGUSR2: submitit's preemption signal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


class StopSignals:
    """``with StopSignals(loop) as stops:`` around ``loop``'s job, which calls `watch` first and
    `reraise` when it ends or is cancelled.

    Only in the main thread (where handlers run), and only handlers that are Python functions:
    Python's own Ctrl-C handler is left to ``asyncio.Runner``, which already cancels the job. A
    handler that returns instead of raising (a training run that defers its stop) does not stop
    the job. A signal the loop did not get to (it came as the job ended) is handled on leaving."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.handlers: dict[int, Any] = {}
        self.pending: list[int] = []
        self.caught: BaseException | None = None
        self.main: asyncio.Task | None = None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                handler = signal.getsignal(sig)
                if callable(handler) and handler is not signal.default_int_handler:
                    self.handlers[sig] = handler
                    signal.signal(sig, self._receive)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for sig, handler in self.handlers.items():
            signal.signal(sig, handler)
        for signum in list(self.pending):
            self._deliver(signum)
        if self.caught is not None and exc is not self.caught:
            raise self.caught

    def _receive(self, signum: int, _frame: Any) -> None:
        """The signal handler while the job runs: it only asks the loop to deliver the signal."""
        self.pending.append(signum)
        self.loop.call_soon_threadsafe(self._deliver, signum)

    def _deliver(self, signum: int) -> None:
        if signum not in self.pending:
            return
        self.pending.remove(signum)
        try:
            self.handlers[signum](signum, None)
        except BaseException as e:  # the handler's way of stopping the run
            if self.caught is None:
                self.caught = e
                if self.main is not None:
                    self.main.cancel()

    def watch(self) -> None:
        """Called first thing in the job's main task: the task a stop cancels."""
        self.main = asyncio.current_task()
        self.reraise()

    def reraise(self) -> None:
        if self.caught is not None:
            raise self.caught


__all__ = ["STOP_SIGNALS", "StopSignals"]
