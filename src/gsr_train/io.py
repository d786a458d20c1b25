"""Small file helpers shared by every stage: atomic writes, hashing, JSONL reading.

Every file the project writes goes through ``atomic_write`` so a crash or a kill never
leaves a half-written cache or result behind: readers see the old file or the new one.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator[Any]:
    """Open a temporary file next to ``path``; rename it over ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file normal permissions
    try:
        if path.suffix == ".gz":
            # no file name and a zero mtime in the header: same content -> same bytes
            with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                if "b" in mode:
                    yield gz
                else:
                    with io.TextIOWrapper(gz, encoding=kwargs.get("encoding", "utf-8"), newline="") as handle:
                        yield handle
        else:
            with open(tmp, mode, **kwargs) as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive flock on the file ``path`` (created if needed) for the block: one process at a
    time builds a given cache; the others wait, then find it built."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _dir_lock(folder: Path) -> Iterator[None]:
    """An exclusive flock on a directory (no lock file left behind); a no-op where flock is missing."""
    try:
        import fcntl  # lazy: POSIX only; elsewhere the lock is a no-op
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    try:
        import ctypes  # lazy: only the Linux renameat2 path loads libc

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Build a directory under a temporary name and swap it in when the block succeeds.

    Concurrent writers of the same folder all succeed: the swap happens under a lock on the
    parent folder. The folder that was there when the block started is replaced (a rebuild
    of a stale copy) in one atomic exchange where the OS offers it, so readers never see it
    missing; a folder that another writer published while this block ran is kept and this
    block's copy dropped (folders written this way are keyed by their inputs). No
    temporary folder survives, whatever happens.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    found = _inode(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        with _dir_lock(path.parent):
            now = _inode(path)
            if now is None:
                os.replace(tmp, path)
            elif now == found:  # the copy we meant to replace
                if not _exchange(tmp, path):
                    old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
                    os.replace(path, old / "x")
                    os.replace(tmp, path)
                    shutil.rmtree(old, ignore_errors=True)
            # else: another writer published it while this block ran; keep theirs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    with atomic_write(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=indent, ensure_ascii=False)
        f.write("\n")


def write_jsonl(path: str | os.PathLike, rows) -> int:
    n = 0
    with atomic_write(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False))
            f.write("\n")
            n += 1
    return n


def open_text(path: str | os.PathLike):
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


class BadLine(json.JSONDecodeError):
    """A line that cannot be read: not JSON, not UTF-8, or cut off by a truncated file."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg, "", 0)
        self.msg = msg  # JSONDecodeError would append ": line 1 column 1 (char 0)"

    def __str__(self) -> str:
        return self.msg


def iter_jsonl(path: str | os.PathLike, skip_lines: int = 0) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, record)`` of a (gzipped) JSONL file, skipping blank lines.

    A line that is not valid JSON or not UTF-8 is yielded as a `BadLine` (a
    `json.JSONDecodeError`) instead of raising, and so is the end of a truncated or
    damaged gzip stream (once, as the last item), so each caller decides whether it is an
    error (naming the line) or a counted skip. ``skip_lines``: lines to pass over unparsed
    (resuming a partly read file).
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    lineno = 0
    try:
        with opener(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                if lineno <= skip_lines or not raw.strip():
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    yield lineno, BadLine(f"not valid UTF-8 ({e.reason} at byte {e.start})")
                    continue
                try:
                    yield lineno, json.loads(text)
                except json.JSONDecodeError as e:
                    yield lineno, BadLine(f"not valid JSON ({e.msg})")
    except (EOFError, OSError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError)):
            raise
        yield lineno + 1, BadLine(f"the file is truncated or damaged after line {lineno} ({type(e).__name__}: {e})")


def cache_meta(meta_path: Path, fmt: Any, key: str | None, where: Any, error: type[Exception]) -> dict:
    """A cache entry's ``meta.json``-style record, read and checked against the format this code writes
    and (when given) the inputs' ``key``; ``error`` (the cache's Stale* class) names what is wrong."""
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise error(f"{meta_path}: unreadable ({e})") from e
    if meta.get("format") != fmt:
        raise error(f"{where}: format {meta.get('format')} != {fmt}")
    if key is not None and meta.get("key") != key:
        raise error(f"{where}: built for other inputs ({meta.get('key')} != {key})")
    return meta


def file_digest(path: str | os.PathLike, algo: str = "sha256") -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def stable_hash(*parts: Any, length: int = 16) -> str:
    """Hash JSON-serialisable parts into a short hex key (used for cache folder names)."""
    payload = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:length]
