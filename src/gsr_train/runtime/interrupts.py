"""Stop signals (Ctrl-C, ``kill``, a cluster's preemption or time-limit warning) end a run cleanly.

A signal never stops training in the middle of a step. While Lightning trains, the handler only
records it; `gsr_train.runtime.checkpoints.LastCheckpoint` then writes ``last.ckpt`` at the
next state a resumed run can continue from exactly (a step boundary, or the end of the epoch
after validation) and raises `RunInterrupted`. Outside training (index, embeddings,
scoring) there is no state to save, every cache being written atomically, so the run stops at
once. `gsr_train.runs.experiment.run_experiment` marks the folder interrupted, requeues a
SLURM job on its requeue signal, and exits with ``128 + signal``. A second Ctrl-C stops at once.

Lightning's own handlers are not used for this: its SIGTERM handling ends the process with
status 0, and its SLURM handler saves a checkpoint from inside the signal handler, in the middle
of whatever the process was doing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from gsr_train.llm.stop_signals import STOP_SIGNALS

log = logging.getLogger(__name__)

REQUEUE_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


class RunInterrupted(BaseException):
    """A stop signal ended the run. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int, checkpoint: str | None = None) -> None:
        self.signum, self.checkpoint = int(signum), checkpoint
        super().__init__(f"{signal.Signals(self.signum).name} received")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class Interrupts:
    """The process's stop-signal handler: records the first signal; raises at once unless
    training has asked to defer (``deferring``), then the trainer stops at its next safe point."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.deferring = False
        self.previous: dict[int, Any] = {}

    @property
    def installed(self) -> bool:
        return bool(self.previous)

    def install(self) -> bool:
        """Take over the stop signals (main thread only); False when it cannot or already did."""
        if self.installed or threading.current_thread() is not threading.main_thread():
            return False
        self.signum, self.deferring = None, False
        for sig in STOP_SIGNALS:
            self.previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self.handle)
        return True

    def uninstall(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self.previous = {}
        self.deferring = False

    def reclaim(self) -> None:
        """Handle the stop signals again after someone else (Lightning's fit) replaced a handler."""
        if self.installed and threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                signal.signal(sig, self.handle)

    def handle(self, signum: int, _frame: Any = None) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        if self.signum is None:
            self.signum = int(signum)
        if not self.deferring:
            raise RunInterrupted(signum)
        log.warning(
            "%s received: stopping at the next resumable point (a step boundary or the end of this "
            "epoch), after writing checkpoints/last.ckpt; Ctrl-C again stops at once",
            signal.Signals(signum).name,
        )

    def previous_handler(self, signum: int) -> Callable | None:
        handler = self.previous.get(signum)
        return handler if callable(handler) else None


INTERRUPTS = Interrupts()


def requeue_slurm_job(signum: int, job: str | None) -> str | None:
    """Requeue the SLURM job after its requeue signal: through the handler that was there before
    ours (submitit's, which also counts requeues and then exits), else ``scontrol requeue`` as
    Lightning does. Returns what was done, or None when this is not a SLURM job / requeue signal."""
    if job is None or signum not in REQUEUE_SIGNALS:
        return None
    previous = INTERRUPTS.previous_handler(signum)
    INTERRUPTS.uninstall()
    if previous is not None:
        log.info("handing %s to the job's own requeue handler", signal.Signals(signum).name)
        previous(signum, None)  # submitit: requeues and exits
        return "handled by the job's requeue handler"
    cmd = ["scontrol", "requeue", job]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=os.environ.copy())
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("could not requeue SLURM job %s: %s", job, e)
        return f"requeue failed: {e}"
    if done.returncode != 0:
        log.warning("`%s` failed (%d): %s", " ".join(cmd), done.returncode, done.stderr.strip())
        return f"requeue failed: {done.stderr.strip() or done.returncode}"
    log.info("requeued SLURM job %s: it continues in the same run folder", job)
    return "requeued"


def leave_stopped_run(code: int) -> None:
    """End a stopped run's process now when threads of its own still run (a local LLM server
    answering, its batching worker): letting the interpreter tear them down in the middle of native
    code aborts the process ("terminate called without an active exception", exit status 134), and
    the scheduler would no longer read 128 + the signal. The run is marked and its files are written
    by then; with no other thread alive this returns and the usual ``SystemExit`` ends the process."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()]
    if not others:
        return
    log.info("leaving with %d thread(s) still running: %s", len(others), ", ".join(t.name for t in others[:5]))
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
