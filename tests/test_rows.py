import gzip
import json

import pytest

from gsr_train.data.rows import RowError, load_rows


def good_row(i=0, **kw):
    row = {
        "id": f"q{i}",
        "question": "who is x married to",
        "answer": ["Y"],
        "q_entity": ["X"],
        "a_entity": ["Y"],
        "graph": [["X", "people.person.spouse_s", "m.01"], ["m.01", "people.marriage.spouse", "Y"]],
        "choices": [],
    }
    row.update(kw)
    return row


def write(path, rows, raw_lines=()):
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        for line in raw_lines:
            f.write(line + "\n")


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_loads_valid_rows(tmp_path, suffix):
    write(tmp_path / f"train{suffix}", [good_row(0), good_row(1)])
    rows, report = load_rows(tmp_path, "train")
    assert [r.id for r in rows] == ["q0", "q1"]
    assert rows[0].graph[1] == ("m.01", "people.marriage.spouse", "Y")
    assert report.loaded == 2 and report.skipped == 0


def test_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([good_row(0), good_row(1)]), tmp_path / "test.parquet")
    rows, _ = load_rows(tmp_path, "test")
    assert len(rows) == 2 and rows[1].answer == ("Y",)


@pytest.mark.parametrize(
    "bad, field, reason",
    [
        ({"question": ""}, "question", "missing or empty"),
        ({"answer": "Y"}, "answer", "expected a list"),
        ({"q_entity": []}, "q_entity", "empty"),
        ({"graph": [["X", "r"]]}, "graph", "triple #0"),
        ({"graph": [["X", "r", 3]]}, "graph", "triple #0"),
        ({"graph": None}, "graph", "missing"),
    ],
)
def test_malformed_row_names_file_row_and_field(tmp_path, bad, field, reason):
    write(tmp_path / "train.jsonl", [good_row(0), good_row(7, **bad)])
    with pytest.raises(RowError) as err:
        load_rows(tmp_path, "train")
    assert err.value.row_id == "q7" and err.value.field == field
    assert str(tmp_path / "train.jsonl") in str(err.value) and reason in str(err.value)


def test_skip_counts_per_reason(tmp_path):
    rows = [good_row(0), good_row(1, answer="Y"), good_row(2, q_entity=[]), good_row(3, q_entity=[]), good_row(0)]
    write(tmp_path / "validation.jsonl", rows, raw_lines=["{not json"])
    loaded, report = load_rows(tmp_path, "validation", skip_invalid=True)
    assert [r.id for r in loaded] == ["q0"]
    assert report.skipped == 5
    assert report.counts["q_entity: empty"] == 2
    assert report.counts["id: duplicate id"] == 1
    assert sum(n for reason, n in report.counts.items() if reason.startswith("<json>")) == 1
    assert "5 skipped" in report.summary()


def test_missing_split_file_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file for split 'test'"):
        load_rows(tmp_path, "test")


def test_real_fixture_rows(webqsp_mini):
    rows, report = load_rows(webqsp_mini, "test")
    assert len(rows) == 232 and report.skipped == 0
