"""What a run leaves and says: a log without third-party noise (tips, deprecations, Lightning's
hints, progress bars), the main table printed once, epochs and rates written the same way in the
log and the bar, results compressed, and a run folder that still reads after it is moved."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from gsr_train.eval.aggregate import aggregate
from gsr_train.eval.evaluate import evaluate_results
from gsr_train.eval.tail import find_results, in_run, read_metrics
from gsr_train.progress import rate_text
from gsr_train.runtime.log_progress import EpochBar, epoch_text
from gsr_train.runtime.summary import run_summary

from .conftest import REPO, offline_env, run_train
from .subgraphrag_toy import toy_quickstart_args, write_toy

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NOISE = re.compile(r"Tip: |litlogger|litmodels|Deprecat|FutureWarning|log_every_n_steps|Loading weights|UserWarning")


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """A quickstart-like run (SubgraphRAG, 2 epochs, a CSV logger, Lightning's bar) on toy data,
    stderr not a terminal, as in a cluster job's log."""
    root = tmp_path_factory.mktemp("short_run")
    data = write_toy(root / "data", sizes=(24, 8, 8))
    args = [*toy_quickstart_args(data), "logger=csv", "eval_ks=[5,20]"]
    env = offline_env(root / "cache")
    env.pop("PYTHONWARNINGS", None)
    done = run_train(args, root, env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (root / "outputs" / "subgraphrag_quickstart").iterdir()
    return root, run, done


def test_the_log_and_the_output_hold_no_third_party_noise(short_run):
    _, run, done = short_run
    log = (run / "train.log").read_text()
    for where, text in (("train.log", log), ("stdout", done.stdout), ("stderr", done.stderr)):
        noisy = [line for line in text.splitlines() if NOISE.search(line)]
        assert noisy == [], (where, noisy)


def test_the_main_table_is_printed_once(short_run):
    _, _, done = short_run
    main = [line for line in done.stdout.splitlines() if line.startswith("| model | ")]  # subgraphrag vs cosine
    assert len(main) == 1, done.stdout
    assert done.stdout.count("### by hop count") == 1


def test_epochs_and_rates_read_the_same_in_the_log_and_the_bar():
    assert epoch_text(11, 12) == "epoch 12/12"  # the last of 12 epochs, as the log says it

    class Trainer:
        max_epochs = 12

    bar = EpochBar()
    bar._trainer = Trainer()  # what Lightning sets when the bar is attached
    assert bar._get_train_description(11).strip() == "Epoch 12/12"  # Lightning's own: "Epoch 11/11"
    assert rate_text(12.4) == "12/s" and rate_text(0.25) == "4.0 s/step" and rate_text(0.0) == "0/s"


def test_results_are_compressed_and_a_moved_run_folder_still_reads(short_run, tmp_path):
    root, run, _ = short_run
    results = run / "results_test.jsonl.gz"
    assert results.is_file() and not (run / "results_test.jsonl").exists()
    doc = read_metrics(run / "metrics.json")
    assert doc["rows"][0]["results"] == "results_test.jsonl.gz"  # relative to the run folder
    assert not os.path.isabs(doc["checkpoint"]) and not os.path.isabs(doc["results_path"])
    moved = tmp_path / "elsewhere" / "my_run"
    shutil.copytree(run, moved)  # a copy: the module's other tests keep the original
    doc = read_metrics(moved / "metrics.json")
    assert in_run(moved, doc["checkpoint"]).is_file()
    assert in_run(moved, doc["rows"][0]["results"]) == find_results(moved, "test")
    assert "| subgraphrag |" in run_summary(moved, "subgraphrag_quickstart", None)
    (row,) = [r for r in aggregate(moved.parent, write=False, quiet=True) if r["method"] == "subgraphrag"]
    assert row["sp_recall"] == doc["rows"][0]["metrics"]["sp_recall"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GSR_TRAIN_CACHE": str(root / "cache")}
    scored = subprocess.run(
        [
            sys.executable,
            str(REPO / "eval.py"),
            f"ckpt_path={moved}",
            f"data.dir={root / 'data'}",
            "logger=none",
            "~callbacks.rich_progress",
            f"hydra.run.dir={tmp_path / 'scored'}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert f"evaluating {moved / 'checkpoints'}" in scored.stderr  # the moved folder's own checkpoint


def test_old_run_folders_with_plain_results_still_read(short_run, tmp_path):
    root, run, _ = short_run
    with gzip.open(run / "results_test.jsonl.gz", "rt") as f:
        (tmp_path / "results_test.jsonl").write_text(f.read())  # what runs wrote before
    assert find_results(tmp_path, "test") == tmp_path / "results_test.jsonl"
    old = evaluate_results(tmp_path / "results_test.jsonl", root / "data", "test", cache_dir=root / "cache")
    new = evaluate_results(run / "results_test.jsonl.gz", root / "data", "test", cache_dir=root / "cache")
    assert json.dumps(old.overall, sort_keys=True) == json.dumps(new.overall, sort_keys=True)


def test_every_summary_table_is_markdown():
    """One table style: the LLM usage table (and build-index, embed, build-supervision, make-synthetic,
    the LLM steps, which print through :func:`markdown_table`) is Markdown, as a run's tables are."""
    from gsr_train.eval.markdown import markdown_table
    from gsr_train.llm.usage import UsageStats

    text = UsageStats().table("LLM usage")
    assert text.splitlines()[:3] == ["### LLM usage", "", "|  | requests | prompt tokens | completion tokens | cost |"]
    assert "| fresh | 0 | 0 | 0 | 0.0000 |" in text and "no fresh requests" in text
    assert markdown_table(["split", "questions"], [["test", "1,234"]]).splitlines() == [
        "| split | questions |",
        "|---|---:|",
        "| test | 1,234 |",
    ]


def test_hugging_face_progress_bars_are_off_when_stderr_is_no_terminal():
    """transformers' "Loading weights" bars and hub downloads write no bars into a log file."""
    code = (
        "from gsr_train.runtime import quiet; quiet.install(terminal=False)\n"
        "from huggingface_hub.utils import are_progress_bars_disabled\n"
        "import transformers.utils.logging as tl\n"
        "print(are_progress_bars_disabled(), tl.is_progress_bar_enabled(), tl.get_verbosity())\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "False", "40"]  # bars off, transformers logs errors only
