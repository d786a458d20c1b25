"""Errors that are the user's to fix, and the one way every command reports them.

Bad rows, unreadable or missing split files and an unwritable cache folder are raised as
subclasses of `UserError` by the lower layers (data, kg). Commands (``train.py``,
``eval.py``, ``data_prep/*``, ``gsr-train``) print them as one line, ``error: <message>``, on
stderr and exit with status 2: a traceback would bury the file, row and field the message
names. This module sits at the bottom of the package so every layer can use it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

USER_ERROR_EXIT = 2


class UserError(Exception):
    """Base of the errors a user fixes (data, options, folders): reported in one line, exit 2."""


class RowError(UserError, ValueError):
    """A row that does not match the RoG format; the message names file, row and field.

    ``category``: the reason without row-specific detail, under which skips are counted
    (defaults to ``reason``).
    """

    def __init__(self, source: str, row_id: str, field: str, reason: str, category: str | None = None):
        self.source, self.row_id, self.field, self.reason = source, row_id, field, reason
        self.category = category or reason
        super().__init__(f"{source}: row {row_id!r}: field {field!r}: {reason}")


class DataFileError(UserError, ValueError):
    """A split file that cannot be read at all (truncated, not parquet, wrong schema)."""


class SplitNotFoundError(UserError, FileNotFoundError):
    """No file (or hub dataset) for a split; still a FileNotFoundError for older callers."""


class SplitFilesError(UserError, FileExistsError):
    """Two different files for one split (``train.jsonl`` next to ``train.parquet``)."""


class SyntheticConfigError(UserError, ValueError):
    """``data.synthetic.*`` options that do not make a world (a count out of range, too few
    entities for the questions asked)."""


class CacheWriteError(UserError, OSError):
    """A folder the command must write to is read-only, not ours, or on a full disk."""


_ALWAYS_WRITES = {errno.EROFS, errno.ENOSPC, errno.EDQUOT}  # only a write can fail this way
_DENIED = {errno.EACCES, errno.EPERM}


def _inside(path: Any, folder: Path) -> bool:
    if not path:
        return False
    try:
        return Path(os.path.abspath(os.fsdecode(path))).is_relative_to(Path(os.path.abspath(folder)))
    except (TypeError, ValueError):
        return False


def folder_write_error(err: BaseException, folder: str | os.PathLike, what: str, fix: str) -> CacheWriteError | None:
    """``err`` as a `CacheWriteError` when it is a failed write into ``folder`` (read-only
    file system, full disk or quota, permission denied there), else None (a real bug stays one)."""
    if not isinstance(err, OSError) or isinstance(err, UserError):
        return None
    folder = Path(folder)
    inside = _inside(err.filename, folder) or _inside(err.filename2, folder)
    if (err.errno in _ALWAYS_WRITES and (inside or not err.filename)) or (err.errno in _DENIED and inside):
        reason = {
            errno.EROFS: "it is on a read-only file system",
            errno.ENOSPC: "no space left on its disk",
            errno.EDQUOT: "disk quota exceeded",
        }.get(err.errno, f"permission denied ({err.filename or folder})")
        full = err.errno in (errno.ENOSPC, errno.EDQUOT)
        advice = f"Free space there, or {fix} on a disk with room" if full else fix[:1].upper() + fix[1:]
        out = CacheWriteError(f"cannot write {what} into {folder}: {reason}. {advice}")
        out.errno = err.errno
        return out
    return None


def cache_write_error(
    err: BaseException, cache_dir: str | os.PathLike, what: str = "the cache"
) -> CacheWriteError | None:
    """`folder_write_error` for the cache folder: the fix is another ``GSR_TRAIN_CACHE``."""
    return folder_write_error(
        err, cache_dir, what, "set GSR_TRAIN_CACHE (or the command's cache option) to a writable folder"
    )


def run_write_error(err: BaseException, run_dir: str | os.PathLike) -> CacheWriteError | None:
    """`folder_write_error` for a run's own folder: the fix is a run folder on another disk."""
    return folder_write_error(err, run_dir, "the run's files", "give hydra.run.dir a folder")


def _has_room(folder: str | os.PathLike, need: int = 64 << 20) -> bool:
    """Whether the disk of ``folder`` (or of its nearest existing parent) has ``need`` bytes free."""
    path = Path(os.path.abspath(folder))
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free > need
    except OSError:
        return False


def user_error_message(
    err: BaseException,
    extra: Sequence[type[BaseException]] = (),
    cache_dirs: Iterable[str | os.PathLike | None] = (),
    run_dirs: Iterable[str | os.PathLike | None] = (),
) -> str | None:
    """The one-line message of a user's error (a `UserError`, one of ``extra``, or a failed
    write into one of the ``cache_dirs`` or ``run_dirs``), or None for anything else (a bug keeps its
    traceback). A full disk named by no file is blamed on the folder whose disk is full."""
    if isinstance(err, UserError) or (extra and isinstance(err, tuple(extra))):
        return str(err)
    places: list[tuple[str | os.PathLike, Callable[..., CacheWriteError | None]]] = [
        *((f, cache_write_error) for f in cache_dirs if f is not None),
        *((f, run_write_error) for f in run_dirs if f is not None),
    ]
    unnamed = isinstance(err, OSError) and not (err.filename or err.filename2)
    if unnamed and getattr(err, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
        places = [p for p in places if not _has_room(p[0])] or places
    for folder, wrap in places:
        wrapped = wrap(err, folder)
        if wrapped is not None:
            return str(wrapped)
    return None


@contextlib.contextmanager
def user_error_exit(
    extra: Sequence[type[BaseException]] = (),
    cache_dirs: Iterable[str | os.PathLike | None] = (),
    run_dirs: Iterable[str | os.PathLike | None] = (),
) -> Iterator[None]:
    """Inside the block, a user's error prints ``error: <message>`` on stderr and exits 2."""
    try:
        yield
    except Exception as e:
        message = user_error_message(e, extra, cache_dirs, run_dirs)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(USER_ERROR_EXIT) from None


def report_user_errors(
    fn: Callable[..., Any],
    *args: Any,
    extra: Sequence[type[BaseException]] = (),
    cache_dirs: Iterable[str | os.PathLike | None] = (),
    run_dirs: Iterable[str | os.PathLike | None] = (),
    **kwargs: Any,
) -> Any:
    """``fn(*args, **kwargs)`` inside `user_error_exit` (what every command's ``main`` runs)."""
    with user_error_exit(extra, list(cache_dirs), list(run_dirs)):
        return fn(*args, **kwargs)


class PreflightError(UserError, ValueError):
    """Inputs a run needs are missing or wrong: found before any long work starts."""
