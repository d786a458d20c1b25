"""data_prep commands and ``gsr-train`` verbs (issue 26, item 6): the one-line errors of train.py
(``error: <message>`` on stderr, exit status 2, no traceback) for bad data and user mistakes; an
honest ``action`` in build_index.py's summary; the skip counts of an index in a loggable form.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gsr_train.data.errors import UserError, report_user_errors
from gsr_train.kg.index import get_index

from .conftest import load_script

REPO = Path(__file__).resolve().parents[1]
SPLITS = ("train", "validation", "test")


def _rows(split: str, n: int = 6) -> list[dict]:
    return [
        {
            "id": f"{split}-{i}",
            "question": f"{split} question {i}",
            "answer": ["c"],
            "q_entity": [f"a{i}"],
            "a_entity": ["c"],
            "graph": [[f"a{i}", "r.x", "b"], ["b", f"r.y{i % 3}", "c"]],
            "choices": [],
        }
        for i in range(n)
    ]


def _folder(root: Path, fault: str | None = None) -> Path:
    """Three parquet splits; ``fault`` spoils train: ``nan_choices`` or ``truncated_parquet``."""
    root.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        rows = _rows(split)
        if split == "train" and fault == "nan_choices":
            rows = [{**r, "choices": math.nan} for r in rows]  # a float column, as pandas writes missing lists
        pq.write_table(pa.Table.from_pylist(rows), root / f"{split}.parquet")
    if fault == "truncated_parquet":
        path = root / "train.parquet"
        path.write_bytes(path.read_bytes()[:-60])
    return root


def _env(cache: Path) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "GSR_TRAIN_CACHE": str(cache)}


def _load(script: str):
    return load_script(REPO / "data_prep" / f"{script}.py", f"data_prep_{script}")


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ")
    return last


@pytest.mark.parametrize(
    "fault, names",
    [
        ("nan_choices", ["train.parquet", "field 'choices'", "expected a list"]),
        ("truncated_parquet", ["train.parquet", "truncated"]),
    ],
)
def test_build_index_names_bad_data_in_one_line(tmp_path, fault, names):
    data = _folder(tmp_path / "data", fault)
    proc = subprocess.run(
        [sys.executable, str(REPO / "data_prep" / "build_index.py"), "--data", str(data)],
        cwd=REPO,
        env=_env(tmp_path / "cache"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = _one_line_error(proc.stderr)
    assert all(n in last for n in names), last


@pytest.mark.parametrize("case", ["missing folder", "unknown split", "two files", "leakage"])
def test_build_index_user_mistakes_are_one_line(tmp_path, capsys, case):
    data = _folder(tmp_path / "data")
    argv = ["--data", str(data), "--cache", str(tmp_path / "cache")]
    if case == "missing folder":
        argv[1] = str(tmp_path / "nowhere")
    elif case == "unknown split":
        argv += ["--splits", "train,dev"]
    elif case == "two files":
        (data / "test.jsonl").write_text(json.dumps(_rows("test")[0]) + "\n")
    else:
        pq.write_table(pa.Table.from_pylist(_rows("train")), data / "test.parquet")  # test = train
    with pytest.raises(SystemExit) as stop:
        _load("build_index").main(argv)
    assert stop.value.code == 2
    last = _one_line_error(capsys.readouterr().err)
    expected = {
        "missing folder": "nowhere",
        "unknown split": "'dev'",
        "two files": "more than one file",
        "leakage": "in both 'train' and 'test'",
    }[case]
    assert expected in last


@pytest.mark.parametrize("script", ["build_supervision", "embed"])
def test_other_data_prep_scripts_name_bad_rows_in_one_line(tmp_path, capsys, script):
    data = _folder(tmp_path / "data", "nan_choices")
    cache_option = "--cache_dir" if script == "embed" else "--cache"
    with pytest.raises(SystemExit) as stop:
        _load(script).main(["--data", str(data), cache_option, str(tmp_path / "cache")])
    assert stop.value.code == 2
    assert "field 'choices'" in _one_line_error(capsys.readouterr().err)


def test_gsr_train_verbs_use_the_same_error_line(tmp_path, capsys):
    from gsr_train.cli import main

    assert main(["aggregate", str(tmp_path / "no-sweep")]) == 2
    last = _one_line_error(capsys.readouterr().err)
    assert last.startswith("error: gsr-train aggregate: ") and "no-sweep" in last
    (tmp_path / "empty").mkdir()
    assert main(["aggregate", str(tmp_path / "empty")]) == 2
    assert "no run results under" in _one_line_error(capsys.readouterr().err)


def test_report_user_errors_passes_bugs_through(capsys):
    def bad_data():
        raise UserError("data.jsonl: row 'q1': field 'graph': missing")

    with pytest.raises(SystemExit) as stop:
        report_user_errors(bad_data)
    assert stop.value.code == 2 and capsys.readouterr().err == "error: data.jsonl: row 'q1': field 'graph': missing\n"
    with pytest.raises(KeyError):  # a bug keeps its traceback
        report_user_errors(lambda: {}["x"])


# ----------------------------------------------------------------------------- honest action


def test_build_index_action_says_what_the_call_did(tmp_path):
    data = _folder(tmp_path / "data")
    build_index = _load("build_index")
    argv = ["--data", str(data), "--cache", str(tmp_path / "cache"), "--json", str(tmp_path / "s.json")]
    first = build_index.main(argv)
    assert first["action"] == "built" and first["build"] == {"resumed": False}
    assert build_index.main(argv)["action"] == "opened"
    target = Path(first["folder"]) / "test" / "edge_rel.bin"
    target.write_bytes(b"\x00" * target.stat().st_size)
    assert build_index.main(argv)["action"] == "rebuilt damaged cache"


def _waiting_on_lock(pid: int) -> bool:
    """Whether ``pid`` waits for a file lock (a ``->`` line of /proc/locks)."""
    return any("->" in line and f" {pid} " in line for line in Path("/proc/locks").read_text().splitlines())


def test_build_index_says_when_another_process_built_the_index(tmp_path):
    """A second builder waits on the lock, then opens what the first built: not "built"."""
    if not Path("/proc/locks").exists():
        pytest.skip("needs /proc/locks to see the second process wait")
    from gsr_train.kg.index import index_key
    from gsr_train.kg.index_build import build_index_folder, build_lock

    data, cache = _folder(tmp_path / "data"), tmp_path / "cache"
    key = index_key(data, SPLITS, False)
    folder = cache / "kg_index" / key
    with build_lock(folder):
        proc = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "data_prep" / "build_index.py"),
                "--data",
                str(data),
                "--json",
                str(tmp_path / "s.json"),
            ],
            cwd=REPO,
            env=_env(cache),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while not _waiting_on_lock(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _waiting_on_lock(proc.pid), "the second builder never waited on the lock"
        build_index_folder(data, SPLITS, folder, key=key)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads((tmp_path / "s.json").read_text())["action"] == "waited for another builder"


# ----------------------------------------------------------------------------- skip summary


def test_index_skip_summary_and_one_line_description(tmp_path):
    data = _folder(tmp_path / "data")
    rows = _rows("validation")
    rows[1]["graph"] = [["a", "", "b"]]
    rows[4]["q_entity"] = []
    pq.write_table(pa.Table.from_pylist(rows), data / "validation.parquet")
    (data / "test.parquet").unlink()
    payload = gzip.compress("".join(json.dumps(r) + "\n" for r in _rows("test", 200)).encode())
    (data / "test.jsonl.gz").write_bytes(payload[: len(payload) // 2])
    index = get_index(data, SPLITS, cache_dir=tmp_path / "cache", skip_invalid=True)
    again = get_index(data, SPLITS, cache_dir=tmp_path / "cache", skip_invalid=True)  # opened: same figures
    summary = again.skip_summary()
    assert summary == index.skip_summary()
    json.dumps(summary)  # ready for metrics.json
    assert summary["train"] == {
        "loaded": 6,
        "skipped_rows": 0,
        "skipped": {},
        "truncated_files": [],
        "rows_lost": 0,
        "rows_lost_exact": True,
        "duplicate_triples_dropped": 0,
    }
    val = summary["validation"]
    assert val["loaded"] == 4 and val["skipped_rows"] == val["rows_lost"] == 2 and val["rows_lost_exact"]
    assert set(val["skipped"]) == {"graph: a triple is not three non-empty strings", "q_entity: empty"}
    test = summary["test"]
    assert test["skipped_rows"] == 0 and not test["rows_lost_exact"] and len(test["truncated_files"]) == 1
    line = again.describe_skips()
    assert "\n" not in line and line.startswith("train: 6 loaded, none skipped; validation: 4 loaded, 2 skipped (")
    assert f"test: {test['loaded']} loaded, none skipped, {data / 'test.jsonl.gz'} truncated after line" in line


def test_every_data_step_is_a_gsr_train_verb_and_the_old_scripts_still_run(tmp_path, capsys):
    """``gsr-train build-index`` and ``python data_prep/build_index.py`` are one command: the same
    index, the same figures, the same one-line errors; every verb answers --help (through the
    console script's ``main``, in this process: the ``gsr-train`` processes below start it)."""
    import json as _json

    from gsr_train.cli import VERBS, main

    gsr_train = str(Path(sys.executable).parent / "gsr-train")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GSR_TRAIN_CACHE": str(tmp_path / "cache")}
    for verb in VERBS:
        code = main([verb, "--help"])
        shown = capsys.readouterr()
        text = (shown.out + shown.err).lower()
        assert code == 0 and ("usage" in text or "powered by hydra" in text), (verb, text[-500:])
    shown = subprocess.run([gsr_train, "build-index", "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0 and "usage" in (shown.stdout + shown.stderr).lower(), shown.stderr[-500:]
    data = REPO.parent / "shared" / "data" / "webqsp_mini"
    if not data.exists():
        pytest.skip("real fixtures not found")
    runs = {}
    for name, cmd in {
        "verb": [gsr_train, "build-index"],
        "script": [sys.executable, "data_prep/build_index.py"],
    }.items():
        out = tmp_path / f"{name}.json"
        done = subprocess.run(
            [*cmd, "--data", str(data), "--json", str(out)],
            cwd=REPO,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        runs[name] = _json.loads(out.read_text())
    assert runs["verb"]["index_key"] == runs["script"]["index_key"]
    assert runs["verb"]["action"] == "built" and runs["script"]["action"] == "opened"  # one cache, one index
    assert runs["verb"]["splits"] == runs["script"]["splits"]
    missing = subprocess.run(
        [gsr_train, "build-index", "--data", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert missing.returncode == 2 and missing.stderr.startswith("error: ") and "Traceback" not in missing.stderr


def test_table_verbs_and_their_module_forms(tmp_path):
    gsr_train = str(Path(sys.executable).parent / "gsr-train")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    verb = subprocess.run([gsr_train, "gsr-table", str(tmp_path)], capture_output=True, text=True, env=env, timeout=120)
    old = subprocess.run(
        [sys.executable, "-m", "gsr_train.commands.gsr_table", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    # an empty folder: the same one line from both forms, exit 2 (not an empty table, not a traceback)
    assert verb.returncode == old.returncode == 2 and verb.stdout == old.stdout == ""
    message = f"{tmp_path}: no GSR run results under it (no metrics.json of a GSR experiment)"
    assert verb.stderr == old.stderr == f"error: gsr-train gsr-table: {message}\n", (verb.stderr, old.stderr)
    gone = subprocess.run(
        [gsr_train, "robustness-render", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert (
        gone.returncode == 2
        and gone.stderr.strip() == f"error: gsr-train robustness-render: {tmp_path / 'nowhere'}: no such folder"
    )
