"""Faults around the KG index build (issue 26, item 7): a resumed ``.partial`` build checks what
it resumes from, an unwritable cache is one message, and a truncated ``.gz`` under
``skip_invalid`` reports the lost tail of the file instead of "1 skipped row".

The command's output is the subject, so most tests run ``data_prep/build_index.py`` itself.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from gsr_train.kg.index import get_index, index_key, open_index
from gsr_train.kg.index_build import build_index_folder

from .conftest import can_mount_tmpfs, load_script
from .oracles.index_reference import build_index_in_memory

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "data_prep" / "build_index.py"
SPLITS = ["train", "validation", "test"]
ARRAYS = ("ent_ptr", "entity_ids", "topic_mask", "answer_mask", "edge_ptr", "edge_index", "edge_rel")


def _rows(split: str, n: int) -> list[dict]:
    return [
        {
            "id": f"{split}-{i}",
            "question": f"{split} question {i}",
            "answer": [f"c{i % 5}"],
            "q_entity": [f"{split}-a{i}"],
            "a_entity": [f"c{i % 5}"],
            "graph": [[f"{split}-a{i}", "r.one", f"b{i}"], [f"b{i}", f"r.rel{i % 7}", f"c{i % 5}"]],
            "choices": [],
        }
        for i in range(n)
    ]


@pytest.fixture()
def data(tmp_path) -> Path:
    """Three parquet splits in row groups of 4 (batch_rows=4: train is batches 1-10, validation 11-14)."""
    folder = tmp_path / "data"
    folder.mkdir()
    for split, n in (("train", 40), ("validation", 16), ("test", 16)):
        pq.write_table(pa.Table.from_pylist(_rows(split, n)), folder / f"{split}.parquet", row_group_size=4)
    return folder


def _env(cache: Path) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "GSR_TRAIN_CACHE": str(cache)}


def _build_index(*args: str, cache: Path, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    cmd = [*prefix, sys.executable, str(SCRIPT), *args]
    return subprocess.run(cmd, cwd=REPO, env=_env(cache), capture_output=True, text=True, timeout=120)


def _assert_same_as_reference(folder: Path, key: str, data: Path, skip_invalid: bool = False) -> None:
    index, ref = open_index(folder, key), build_index_in_memory(data, SPLITS, skip_invalid=skip_invalid)
    assert list(index.entities) == list(ref.entities) and list(index.relations) == list(ref.relations)
    for s in SPLITS:
        assert index[s].ids == ref[s].ids
        for name in ARRAYS:
            assert torch.equal(getattr(index[s], name).long(), getattr(ref[s], name).long()), (s, name)


def _killed_build(data: Path, cache: Path, stop_after_batches: int) -> tuple[Path, Path, str]:
    """A build stopped (as if killed) after some batches: (final folder, partial folder, key)."""
    key = index_key(data, SPLITS, False)  # what build_index.py computes for these options
    folder = cache / "kg_index" / key
    assert build_index_folder(data, SPLITS, folder, key=key, batch_rows=4, stop_after_batches=stop_after_batches) == {
        "stopped": True
    }
    return folder, folder.with_name(f".{key}.partial"), key


def _flip(path: Path, at: int = 3) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0xFF
    path.write_bytes(bytes(raw))


# ----------------------------------------------------------------------------- (a) resume checks


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_resume_rebuilds_a_damaged_finished_split(data, tmp_path, damage):
    cache = tmp_path / "cache"
    folder, partial, key = _killed_build(data, cache, stop_after_batches=12)  # train done, validation begun
    progress = json.loads((partial / "progress.json").read_text())
    assert "train" in progress["done"] and progress["current"]["split"] == "validation"
    target = partial / "train" / "edge_rel.bin"
    if damage == "flip":
        _flip(target)
    else:
        target.write_bytes(target.read_bytes()[:-4])
    proc = _build_index("--data", str(data), "--batch_rows", "4", "--json", str(tmp_path / "s.json"), cache=cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "edge_rel.bin" in proc.stderr and "rebuilding split 'train'" in proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["action"] == "resumed" and list(summary["build"]["rebuilt"]) == ["train"]
    assert summary["build"]["continued"] == "validation"  # the intact checkpoint is still used
    _assert_same_as_reference(folder, key, data)


@pytest.mark.parametrize("where", ["vocab", "current split"])
def test_resume_checks_the_vocabulary_and_the_current_split(data, tmp_path, where, caplog):
    cache = tmp_path / "cache"
    folder, partial, key = _killed_build(data, cache, stop_after_batches=12)
    if where == "vocab":
        _flip(partial / "vocab" / "entities.data.bin", at=5)
    else:
        _flip(partial / "validation" / "edge_rel.part", at=1)
    meta = build_index_folder(data, SPLITS, folder, key=key, batch_rows=4)
    _assert_same_as_reference(folder, key, data)  # the damaged bytes did not reach the index
    if where == "vocab":
        assert meta["build"]["resumed"] is False and "entities" in meta["build"]["discarded"]
        assert "building again from the start" in caplog.text
    else:
        assert meta["build"]["resumed"] is True and list(meta["build"]["rebuilt"]) == ["validation"]
        assert meta["build"]["splits_reused"] == ["train"]


def test_undamaged_resume_reuses_every_finished_split(data, tmp_path):
    cache = tmp_path / "cache"
    folder, partial, key = _killed_build(data, cache, stop_after_batches=12)
    meta = build_index_folder(data, SPLITS, folder, key=key, batch_rows=4)
    _assert_same_as_reference(folder, key, data)
    assert meta["build"] == {"resumed": True, "splits_reused": ["train"], "continued": "validation", "rebuilt": {}}


# ----------------------------------------------------------------------------- (b) unwritable cache


@pytest.mark.parametrize("fs", ["read-only", "full"])
def test_unwritable_cache_is_one_message(data, tmp_path, fs):
    """An empty read-only cache folder, or one on a full disk (a tiny tmpfs in a private mount
    namespace): one ``error:`` line naming the folder and GSR_TRAIN_CACHE, exit 2."""
    if not can_mount_tmpfs():
        pytest.skip("needs unshare + mount (root) for a read-only or full file system")
    cache = tmp_path / "cache"
    cache.mkdir()
    options = "ro,size=64k" if fs == "read-only" else "size=24k"
    mount = f'mount -t tmpfs -o {options} tmpfs \'{cache}\' && exec "$0" "$@"'
    proc = _build_index(
        "--data", str(data), "--batch_rows", "4", cache=cache, prefix=("unshare", "-m", "sh", "-c", mount)
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot write the KG index into") and str(cache) in last
    assert "GSR_TRAIN_CACHE" in last
    assert ("read-only" in last) if fs == "read-only" else ("no space left" in last)


def test_full_disk_during_a_build_is_a_user_error(data, tmp_path, monkeypatch, capsys):
    """The same without mounts (any user): the disk fills up while the split files grow."""
    from gsr_train.arrays import AppendFile

    build_index = _load_script()

    def no_space(self, values):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(AppendFile, "append", no_space)
    with pytest.raises(SystemExit) as stop:
        build_index.main(["--data", str(data), "--cache", str(tmp_path / "cache")])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: cannot write the KG index into") and "no space left" in err


def _load_script():
    return load_script(SCRIPT, "build_index_script")


# ----------------------------------------------------------------------------- (c) truncated .gz


def _truncated_gz(folder: Path, rows: int = 120) -> int:
    """``train.jsonl.gz`` of ``rows`` rows cut in half; returns the rows still readable."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("validation", "test"):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(split, 4)))
    payload = gzip.compress("".join(json.dumps(r) + "\n" for r in _rows("train", rows)).encode())
    cut = payload[: len(payload) // 2]
    (folder / "train.jsonl.gz").write_bytes(cut)
    readable = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut)
    return readable.count(b"\n")


def test_truncated_gz_under_skip_invalid_reports_the_lost_tail(tmp_path):
    data = tmp_path / "data"
    kept = _truncated_gz(data)
    assert 0 < kept < 120
    out = tmp_path / "s.json"
    proc = _build_index("--data", str(data), "--skip_invalid", "--json", str(out), cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    train = json.loads(out.read_text())["splits"]["train"]
    assert train["questions"] == kept and train["skipped_rows"] == 0  # not "1 skipped"
    assert train["rows_lost_exact"] is False
    assert train["truncated_files"] == [{"file": str(data / "train.jsonl.gz"), "after_line": kept}]
    assert f"train.jsonl.gz truncated after line {kept} (the rest of the file is lost)" in proc.stdout
    # without skip_invalid the same file is one error naming file and line
    proc = _build_index("--data", str(data), cache=tmp_path / "cache")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "train.jsonl.gz" in last and f"line {kept + 1}" in last


def test_truncated_gz_skip_summary_and_reference_agree(tmp_path):
    data = tmp_path / "data"
    kept = _truncated_gz(data, rows=60)
    index = get_index(data, SPLITS, cache_dir=tmp_path / "cache", skip_invalid=True, batch_rows=8)
    ref = build_index_in_memory(data, SPLITS, skip_invalid=True)
    assert len(index["train"]) == len(ref["train"]) == kept
    summary = index.skip_summary()["train"]
    assert summary["skipped_rows"] == summary["rows_lost"] == 0 and not summary["rows_lost_exact"]
    assert ref.skips["train"]["skipped"] == {}  # the in-memory reader does not count a row either
