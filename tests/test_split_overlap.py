"""Train/test leakage is found when the index is built: the same question id, or the same row
(question, answers, set of triples) under another id, in two splits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gsr_train.kg.index import SplitOverlapError, get_index

from .test_retrieval_metrics import row, write_rows

ROOT = Path(__file__).resolve().parents[1]
Q0 = row("q0", ["A"], ["D"], [["A", "r1", "B"], ["B", "r3", "D"]])
Q1 = row("q1", ["X"], ["W"], [["X", "r1", "Y"], ["Y", "r2", "W"]])
Q2 = row("q2", ["P"], ["Q"], [["P", "r1", "Q"]])


def _data(tmp_path, train, test):
    write_rows(tmp_path / "d" / "train.jsonl", train)
    write_rows(tmp_path / "d" / "test.jsonl", test)
    return tmp_path / "d"


def test_clean_splits_record_no_overlap(tmp_path):
    index = get_index(_data(tmp_path, [Q0, Q1], [Q2]), ("train", "test"), tmp_path / "c")
    assert index.meta["overlap"] == {}


def test_same_id_in_two_splits_is_an_error_naming_it_unless_allowed(tmp_path, caplog):
    other = {**Q2, "id": "q1"}  # another question under q1's id
    data = _data(tmp_path, [Q0, Q1], [other])
    with pytest.raises(
        SplitOverlapError,
        match=r"1 question ids in both 'train' and 'test', e\.g\. q1.*"
        r"data\.allow_overlap=true",
    ):
        get_index(data, ("train", "test"), tmp_path / "c")
    # the cached index is refused the same way, and allowed with the option (and a warning)
    with pytest.raises(SplitOverlapError):
        get_index(data, ("train", "test"), tmp_path / "c")
    index = get_index(data, ("train", "test"), tmp_path / "c", allow_overlap=True)
    assert len(index["test"]) == 1
    assert any("allowed by allow_overlap" in r.message for r in caplog.records)


def test_copied_row_under_another_id_is_found_whatever_its_triple_order(tmp_path):
    copy = {**Q1, "id": "t7", "graph": [Q1["graph"][1], Q1["graph"][0], Q1["graph"][1]]}  # reordered + a duplicate
    with pytest.raises(SplitOverlapError, match=r"1 identical rows .* in both 'train' and 'test', e\.g\. q1 = t7"):
        get_index(_data(tmp_path, [Q0, Q1], [copy, Q2]), ("train", "test"), tmp_path / "c")


@pytest.mark.parametrize("change", ["question", "answer", "triple", "topic"])
def test_a_row_that_differs_in_anything_is_not_a_copy(tmp_path, change):
    near = {**Q1, "id": "t7"}
    if change == "question":
        near["question"] += "?"
    elif change == "answer":
        near["a_entity"] = ["Y"]
        near["answer"] = ["Y"]
    elif change == "topic":
        near["q_entity"] = ["Y"]
    else:
        near["graph"] = [Q1["graph"][0], ["Y", "r2", "V"]]
    index = get_index(_data(tmp_path, [Q0, Q1], [near]), ("train", "test"), tmp_path / "c")
    assert index.meta["overlap"] == {}


@pytest.mark.slow
def test_fingerprints_on_the_real_fixture_are_distinct(webqsp_mini, tmp_path):
    index = get_index(webqsp_mini, cache_dir=tmp_path)
    assert index.meta["overlap"] == {}
    folder = Path(index.meta["folder"])
    hashes = np.concatenate([np.fromfile(folder / s / "row_hash.bin", dtype=np.uint64) for s in index.splits])
    assert len(np.unique(hashes)) == len(hashes) == sum(len(index[s]) for s in index.splits)


def test_build_index_command_reports_leakage_with_exit_code_2(tmp_path):
    data = _data(tmp_path, [Q0, Q1], [{**Q2, "id": "q0"}])
    cmd = [
        sys.executable,
        str(ROOT / "data_prep" / "build_index.py"),
        "--data",
        str(data),
        "--splits",
        "train,test",
        "--cache",
        str(tmp_path / "c"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 2 and "question ids in both 'train' and 'test', e.g. q0" in done.stderr
    out = tmp_path / "s.json"
    done = subprocess.run([*cmd, "--allow_overlap", "--json", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["overlap"]["ids"]["train|test"]["examples"] == ["q0"]
