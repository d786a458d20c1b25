"""Every experiment opens its data through one path (``gsr_train.runtime.run_data.load_kg_index``), so the
same bad folder gives every experiment the same one-line error, before any training.

The bad folders are the tiny webqsp_mini cut of the end-to-end tests with one fault each: test
questions that are also training questions (leakage), a malformed row, an empty test split, and a
test split whose answers are in no graph. The chain-file experiments (webqsp_paths) read their graphs from
``data.graphs`` (tested in tests/test_gsr_graphs_option.py).
"""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from .conftest import compose_config
from .test_experiments_e2e import EXPERIMENTS, QUIET, overrides, tiny  # noqa: F401 (the fixture)

pytestmark = pytest.mark.integration

CHAIN_FILES = {"gsr_webqsp_paths", "gsr_leave_relations_out", "gsr_paper_webqsp"}
ROG = [n for n in EXPERIMENTS if n not in CHAIN_FILES]


def _rows(path):
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def _write(path, rows, raw: str = ""):
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
        f.write(raw)


@pytest.fixture(scope="module")
def bad(tiny):
    root = tiny["root"] / "bad"
    if root.exists():
        return root
    mini = tiny["mini"]
    faults = {
        "leak": lambda test, train: (train[:2] + test, ""),
        "malformed": lambda test, train: (test[:2], '{"id": "broken", "question": \n'),
        "empty": lambda test, train: ([], ""),
        "unanswerable": lambda test, train: ([{**r, "a_entity": ["Nowhere at all"]} for r in test], ""),
    }
    for name, fault in faults.items():
        folder = root / name
        shutil.copytree(mini, folder)
        rows, raw = fault(_rows(mini / "test.jsonl.gz"), _rows(mini / "train.jsonl.gz"))
        _write(folder / "test.jsonl.gz", rows, raw)
    return root


def _error(name, tiny, tmp_path, capsys, folder, *extra):
    from gsr_train.runs.experiment import report_user_errors, run_experiment

    given = [o for o in overrides(tiny)[name] if not o.startswith(("data.dir=", "+data.synthetic."))]
    cfg = compose_config(
        [
            f"+experiment={name}",
            f"paths.output_dir={tmp_path / 'run'}",
            f"paths.cache_dir={tiny['cache']}",
            f"experiment_name={name}",
            *QUIET,
            *given,
            f"data.dir={folder}",
            "data.name=bad",
            *extra,
        ]
    )
    with pytest.raises(SystemExit) as stop:
        report_user_errors(run_experiment, cfg)  # what train.py runs
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "failed"
    return err[0]


EXPECTED = {
    "leak": "2 question ids in both 'train' and 'test'",
    "malformed": "malformed/test.jsonl.gz: row 'line 3': field '<json>': not valid JSON",
    "empty": "the evaluation split 'test' of bad is empty",
    "unanswerable": "the evaluation split 'test' of bad: none of its 6 questions has an answer entity in its graph",
}


@pytest.mark.parametrize("fault", sorted(EXPECTED))
@pytest.mark.parametrize("name", ROG)
def test_every_experiment_refuses_the_same_bad_folder_with_the_same_line(name, fault, tiny, bad, tmp_path, capsys):
    # the hub datasets' presets skip malformed rows (data.skip_invalid=true, counted): asked not to, they refuse
    strict = ["data.skip_invalid=false"] if fault == "malformed" else []
    line = _error(name, tiny, tmp_path, capsys, bad / fault, *strict)
    assert EXPECTED[fault] in line, line


def test_skip_and_overlap_options_reach_the_runs_and_the_skips_reach_metrics(tiny, bad, tmp_path, caplog):
    """``data.skip_invalid`` / ``data.allow_overlap``, honoured by the cosine run (which once opened
    its data on its own); the rows skipped are in the run's log and metrics.json."""
    from gsr_train.runs.experiment import run_experiment

    def run(folder, out, *extra):
        cfg = compose_config(
            [
                "+experiment=cosine_baseline",
                f"paths.output_dir={out}",
                f"paths.cache_dir={tiny['cache']}",
                *QUIET,
                f"data.dir={folder}",
                "data.name=bad",
                "encoder.name=hashing",
                *extra,
            ]
        )
        run_experiment(cfg)
        return json.loads((out / "metrics.json").read_text())

    with caplog.at_level("WARNING"):
        doc = run(bad / "malformed", tmp_path / "skip", "data.skip_invalid=true")
    rows = doc["data_rows"][str(bad / "malformed")]["splits"]["test"]
    assert rows["loaded"] == 2 and rows["skipped_rows"] == 1, rows
    assert "test: 2 loaded, 1 skipped" in caplog.text, caplog.text
    assert doc["questions"] == 2
    doc = run(bad / "leak", tmp_path / "leak", "data.allow_overlap=true")
    assert doc["questions"] == 8  # the 2 leaked training questions are scored too


def test_gsr_smoke_cap_larger_than_the_split(tiny, tmp_path):
    """``gsr.max_eval_questions`` above the split's size (a hub preset that skipped bad rows left
    fewer) evaluates every question instead of indexing past the split."""
    from gsr_train.runs.experiment import run_experiment

    from .test_experiments_e2e import SYNTHETIC

    out = tmp_path / "run"
    cfg = compose_config(
        [
            "+experiment=gsr_quickstart",
            f"paths.output_dir={out}",
            f"paths.cache_dir={tiny['cache']}",
            *QUIET,
            *SYNTHETIC,
            "model.epochs=1",
            "gsr.decode.beams=2",
            "gsr.val_decode.beams=2",
            "gsr.max_val_questions=4",
            "gsr.max_eval_questions=1000",
        ]
    )
    run_experiment(cfg)
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["data"]["eval_questions"] == 6  # SYNTHETIC's whole test split
