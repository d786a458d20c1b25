"""How many workers data preparation uses, and an ordered parallel map to spread work over them.

The index build, the embeddings and the shortest-path supervision each take a ``workers``
option (``data.workers`` in a run, ``--workers`` on the ``gsr-train`` data verbs). ``None``
means the cores this process may run on (``os.sched_getaffinity``, which honours ``taskset``
and cgroup CPU sets, unlike ``os.cpu_count``). A run sets the process default once, when it
opens its data (`set_default_workers` from ``load_kg_index``), so every stage that
prepares data later in the run (embeddings, supervision, in whichever module asks for them)
uses the same count without each call site passing it along.

The worker count never changes what is produced: each stage splits its work into pieces whose
results are put back together in input order, so the caches are keyed without it and one
cache serves every worker count.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_default: int | None = None


class WorkersError(ValueError):
    """``workers`` is not a positive integer (the message names the option and the value)."""


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def check_workers(value: Any, option: str = "workers") -> int | None:
    """``value`` as a worker count (``None`` stays ``None``: the cores available); a
    `WorkersError` naming ``option`` for anything but an integer >= 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkersError(f"{option}={value!r}: expected an integer >= 1 or null (the cores available)")
    if value < 1:
        raise WorkersError(f"{option}={value}: expected an integer >= 1 or null (the cores available)")
    return value


def set_default_workers(workers: int | None) -> None:
    """The worker count of this process's data preparation when a call gives none (a run's
    ``data.workers``); ``None``: the cores available."""
    global _default
    _default = check_workers(workers)


PER_CORE = 4  # more workers than this a core only adds overhead (and processes, memory)


def resolve_workers(workers: int | None = None) -> int:
    """The worker count to use: ``workers``, else the process default, else the cores available; at most
    `PER_CORE` a core available, said once when a count asked for more (``--workers 1000``)."""
    chosen = check_workers(workers)
    if chosen is None:
        chosen = _default
    if chosen is None:
        return available_cores()
    cap = PER_CORE * available_cores()
    if chosen > cap:
        _say_capped(chosen, cap)
        return cap
    return chosen


@functools.cache
def _say_capped(chosen: int, cap: int) -> None:
    logging.getLogger(__name__).warning(
        "workers=%d: this process may use %d cores; using %d workers (%d a core; the output is the same for any)",
        chosen,
        available_cores(),
        cap,
        PER_CORE,
    )


@contextlib.contextmanager
def thread_pool(threads: int) -> Iterator[Executor | None]:
    """A pool of ``threads`` threads for `ordered_map`, or ``None`` (work inline) for none."""
    if threads < 1:
        yield None
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="gsr-prep") as pool:
        yield pool


_shared: Any = None


@contextlib.contextmanager
def fork_pool(processes: int, data: Any, initializer: Callable[[], Any] | None = None) -> Iterator[Executor | None]:
    """A pool of ``processes`` processes forked from this one, for work that holds the GIL too
    much for threads (per-level Python of the batched BFS). The tasks read ``data`` with
    `shared`: forked children see this process's memory (memory-mapped arrays included)
    without any copy, so only the tasks' arguments and results cross between processes (one pool
    at a time in a process: ``data`` is a module global while it is open). Where
    ``fork`` is not the safe default (not Linux) the pool is threads; ``None`` for no process.
    ``initializer``: run first in each child (its malloc policy, say)."""
    global _shared
    _shared = data
    try:
        if processes < 1:
            yield None
        elif sys.platform != "linux" or "fork" not in mp.get_all_start_methods():
            with thread_pool(processes) as threads:
                yield threads
        else:
            # forked before the pool starts any thread of its own (ProcessPoolExecutor launches
            # every process at the first submit when forking); the children only compute and exit
            start = functools.partial(_start_child, initializer)
            with ProcessPoolExecutor(processes, mp_context=mp.get_context("fork"), initializer=start) as pool:
                yield pool
    finally:
        _shared = None


def _start_child(initializer: Callable[[], Any] | None) -> None:
    """First thing in a forked worker: the stop signals are the parent's to handle (a run's handler,
    inherited, would raise in the worker's queue loop): Ctrl-C, which reaches the whole process
    group, is ignored, and the parent, stopping, shuts the pool down; a stop signal sent to the
    worker itself ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    if initializer is not None:
        initializer()


def shared() -> Any:
    """The ``data`` of the `fork_pool` this task runs under (in a child or in the parent)."""
    return _shared


def ordered_map(
    fn: Callable[[T], R], items: Iterable[T], pool: Executor | None, ahead: int = 2
) -> Generator[R, None, None]:
    """``fn(item)`` for every item, in input order, on ``pool`` (inline when ``None``).

    At most ``ahead`` items are in flight, so a stream of large items (record batches, question
    chunks) is never read far ahead of its consumer. With a thread pool the work must release the
    GIL (numpy, Arrow, ``nogil`` numba kernels) to run side by side. Several maps may share one
    pool (their items never wait for each other). The consumer does not idle while its next item
    runs or waits in the pool: it takes back the items still queued and does them itself. An
    exception from ``fn`` is raised when its item's turn comes, after the items before it.
    """
    if pool is None:
        yield from map(fn, items)
        return
    pending: deque[tuple[Future, T]] = deque()

    def oldest() -> R:
        future, item = pending.popleft()
        if future.cancel():  # not started yet (the pool is busy): this thread does it instead
            return fn(item)
        for k, (later, later_item) in enumerate(pending):  # while it runs, the later ones not started
            if future.done():
                break
            if later.cancel():
                pending[k] = (_run(fn, later_item), later_item)
        return future.result()

    try:
        for item in items:
            pending.append((pool.submit(fn, item), item))
            if len(pending) >= max(1, ahead):
                yield oldest()
        while pending:
            yield oldest()
    finally:
        for future, _ in pending:
            future.cancel()


def _run(fn: Callable[[T], R], item: T) -> Future:
    """``fn(item)`` run here, as a finished future (its result or its exception)."""
    done: Future = Future()
    try:
        done.set_result(fn(item))
    except BaseException as e:
        done.set_exception(e)
    return done


def prefetch(items: Iterable[T], depth: int = 1) -> Generator[T, None, None]:
    """``items`` read by a thread of its own, at most ``depth`` ahead of the consumer.

    For a reader whose work is sequential (decoding one file after another, with checks that
    depend on the rows before) but need not wait for the consumer: its chain of work then runs
    beside the consumer's instead of inside it. An exception of the reader is raised in its
    turn; closing this generator stops the reader after its current item (and closes it)."""
    slots: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()
    end = object()

    def put(entry: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                slots.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        it = iter(items)
        try:
            for item in it:
                if not put((True, item)):
                    return
            put((True, end))
        except BaseException as e:  # handed to the consumer, raised there in its turn
            put((False, e))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    reader = threading.Thread(target=read, name="gsr-prep-reader", daemon=True)
    reader.start()
    try:
        while True:
            ok, item = slots.get()
            if not ok:
                raise item
            if item is end:
                return
            yield item
    finally:
        stop.set()
        reader.join()
