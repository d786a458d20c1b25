"""Every malformed row is a clear error naming file, row and field, or a counted skip, in jsonl
and in parquet, through the index build and through the evaluate command."""

from __future__ import annotations

import gzip
import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gsr_train.data.rows import RowError
from gsr_train.kg.index import get_index

GOOD = {
    "id": "ok-1",
    "question": "who?",
    "answer": ["B"],
    "q_entity": ["A"],
    "a_entity": ["B"],
    "graph": [["A", "r", "B"]],
    "choices": [],
}
BAD = {
    "nan_choices": ({"choices": math.nan}, "choices", "expected a list"),
    "string_choices": ({"choices": "abc"}, "choices", "expected a list"),
    "missing_a_entity": ({"a_entity": None}, "a_entity", "missing"),
    "missing_q_entity": ({"q_entity": None}, "q_entity", "missing"),
    "empty_q_entity": ({"q_entity": []}, "q_entity", "empty"),
    "number_in_answer": ({"answer": [3]}, "answer", "expected"),
    "short_triple": ({"graph": [["A", "r"]]}, "graph", "triple #0"),
}


def _rows(kind):
    change, _, _ = BAD[kind]
    bad = {**GOOD, "id": "bad-7", **change}
    return [GOOD, bad, {**GOOD, "id": "ok-2"}]


def _write(folder, rows, fmt):
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl.gz":
        with gzip.open(folder / "test.jsonl.gz", "wt") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")  # json writes NaN as NaN, as pandas' to_json does not
        return folder / "test.jsonl.gz"
    arrays = {}
    for k in GOOD:
        values = [r.get(k) for r in rows]
        try:
            arrays[k] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types, as pandas would store them: strings
            arrays[k] = pa.array([json.dumps(v) for v in values])
    pq.write_table(pa.table(arrays), folder / "test.parquet")
    return folder / "test.parquet"


@pytest.mark.parametrize("fmt", ["jsonl.gz", "parquet"])
@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_row_is_named_or_counted(tmp_path, fmt, kind):
    path = _write(tmp_path / "d", _rows(kind), fmt)
    _, field, reason = BAD[kind]
    with pytest.raises(RowError) as err:
        get_index(tmp_path / "d", ("test",), tmp_path / "c")
    message = str(err.value)
    assert str(path) in message and f"field {field!r}" in message and reason in message
    if fmt == "jsonl.gz" or kind not in ("nan_choices", "string_choices", "number_in_answer"):
        assert "bad-7" in message  # the row named by its id
    index = get_index(tmp_path / "d", ("test",), tmp_path / "c", skip_invalid=True)
    skips = index.skips["test"]
    if fmt == "parquet" and kind in ("nan_choices", "string_choices", "number_in_answer"):
        # a column of the wrong type fails every row of the file: all are skipped, and counted
        assert sum(skips["skipped"].values()) == 3 and len(index["test"]) == 0
    else:
        assert index["test"].ids == ["ok-1", "ok-2"] and sum(skips["skipped"].values()) == 1
        assert any(k.startswith(f"{field}:") for k in skips["skipped"])


def test_evaluate_command_names_the_bad_row(tmp_path, capsys):
    from gsr_train.commands import recall as evaluate_mod

    _write(tmp_path / "d", _rows("missing_a_entity"), "jsonl.gz")
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps({"id": "ok-1", "triples": [["A", "r", "B"]], "scores": [1.0]}) + "\n")
    code = evaluate_mod.main(
        ["--results", str(results), "--data", str(tmp_path / "d"), "--split", "test", "--cache", str(tmp_path / "c")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "row 'bad-7': field 'a_entity': missing" in err
