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
