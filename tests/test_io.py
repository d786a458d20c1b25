import gzip
import os

import pytest

from gsr_train.io import atomic_dir, atomic_write, file_digest, write_jsonl


def test_gzip_output_is_byte_identical_across_runs(tmp_path):
    write_jsonl(tmp_path / "a.jsonl.gz", [{"x": 1}, {"y": "é"}])
    first = file_digest(tmp_path / "a.jsonl.gz")
    os.utime(tmp_path / "a.jsonl.gz", (0, 0))
    write_jsonl(tmp_path / "b" / "a.jsonl.gz", [{"x": 1}, {"y": "é"}])
    assert file_digest(tmp_path / "b" / "a.jsonl.gz") == first
    assert gzip.open(tmp_path / "a.jsonl.gz", "rt", encoding="utf-8").read() == '{"x": 1}\n{"y": "é"}\n'


def test_failed_write_keeps_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_write(target) as f:
            f.write("half")
            raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_atomic_dir_replaces_whole_folder_only_on_success(tmp_path):
    folder = tmp_path / "cache"
    with atomic_dir(folder) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(ValueError):
        with atomic_dir(folder) as tmp:
            (tmp / "b").write_text("2")
            raise ValueError
    assert sorted(p.name for p in folder.iterdir()) == ["a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]


def _save_same_cache(folder, barrier):
    barrier.wait()
    with atomic_dir(folder) as tmp:
        for i in range(20):
            (tmp / f"part{i}").write_text(str(i) * 100)
        (tmp / "done").write_text("ok")
    assert (folder / "done").read_text() == "ok"  # every writer sees a complete folder after its block


@pytest.mark.parametrize("existing", [False, True])
def test_forty_synchronized_writers_of_one_cache_all_succeed_and_leave_no_temp(tmp_path, existing):
    import multiprocessing as mp

    folder = tmp_path / "cache" / "key"
    if existing:
        folder.mkdir(parents=True)
        (folder / "stale").write_text("old")
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(40)
    procs = [ctx.Process(target=_save_same_cache, args=(folder, barrier)) for _ in range(40)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 40
    assert sorted(p.name for p in folder.iterdir()) == sorted(["done", *[f"part{i}" for i in range(20)]])
    assert [p.name for p in folder.parent.iterdir()] == ["key"]  # no .tmp / .old folders


def test_threads_writing_one_cache_all_succeed(tmp_path):
    import threading

    folder = tmp_path / "key"
    barrier = threading.Barrier(16)
    errors = []

    def work():
        try:
            _save_same_cache(folder, barrier)
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert [p.name for p in tmp_path.iterdir()] == ["key"]


def test_a_full_disk_named_by_no_file_is_blamed_on_the_folder_whose_disk_is_full(tmp_path, monkeypatch):
    """ENOSPC from a write that names no file: the run folder's disk full and the cache's not (issue 49,
    probe 1) is reported as the run folder's, not as the cache's; the other way round as the cache's."""
    import errno
    import shutil

    from gsr_train.data import errors

    cache, run = tmp_path / "cache", tmp_path / "run"
    cache.mkdir()
    run.mkdir()
    full = {"run"}
    real = shutil.disk_usage

    def usage(path):
        got = real(path)
        return got._replace(free=0) if any(str(path).endswith(name) for name in full) else got

    monkeypatch.setattr(errors.shutil, "disk_usage", usage)
    err = OSError(errno.ENOSPC, "No space left on device")
    said = errors.user_error_message(err, cache_dirs=[cache], run_dirs=[run])
    assert said == (
        f"cannot write the run's files into {run}: no space left on its disk. Free space there, or give "
        "hydra.run.dir a folder on a disk with room"
    )
    full = {"cache"}
    assert errors.user_error_message(err, cache_dirs=[cache], run_dirs=[run]).startswith(
        f"cannot write the cache into {cache}: no space left on its disk"
    )


def test_a_run_failing_on_a_full_disk_still_says_failed(tmp_path, monkeypatch):
    """run.json's atomic write needs room for a second copy; on a full disk (issue 49, probe 1) the
    file is rewritten in place, so the run reads failed, not running, and keeps its attempts."""
    import errno
    import json

    from gsr_train.runtime import run_folder

    run_folder.mark(tmp_path, "running", "quickstart")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run_folder, "write_json", full)
    run_folder.mark(tmp_path, "failed", "quickstart", error="OSError: [Errno 28] No space left on device" * 20)
    state = json.loads((tmp_path / "run.json").read_text())
    assert state["status"] == "failed" and state["attempts"] == 1 and len(state["error"]) == 300
    assert run_folder.run_status(tmp_path) == "failed"

    def other(*args, **kwargs):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(run_folder, "write_json", other)
    with pytest.raises(OSError, match="Permission denied"):  # only a full disk is worked around
        run_folder.mark(tmp_path, "failed", "quickstart")
