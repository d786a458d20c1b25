"""A trainable reader from outside gsr-train (``examples/plugin_reader``) joins with zero edits.

The reader plugin block of docs/how-to/add-a-reader.md runs exactly as written in a fresh checkout: install the package,
train it with ``train.py``, score the run with ``eval.py``, sweep it against a built-in reader into
one table. Then what a user would also do: stop a plugin run with SIGTERM mid-training and continue
it with ``resume=auto`` (the same figures as the uninterrupted run), and make a mistake in its
options or its name (one line, exit 2). ``src/`` never names it.
"""

from __future__ import annotations

import json
import sys

import pytest

from gsr_train.eval.tail import in_run

from .doc_blocks import blocks
from .test_plugin_retriever import _metrics, _run, assert_src_never_names, readme_run_fixture, stop_then_resume

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BLOCK = blocks("docs/how-to/add-a-reader.md", "A reader that trains, as a plugin")[0]
COMMANDS = [line.strip() for line in BLOCK.splitlines() if line.strip() and not line.startswith("#")]
PLUGIN_NAMES = ("candidate_ranker", "candidate-ranker", "CandidateRanker")


# the reader plugin commands of docs/how-to/add-a-reader.md
readme_run = readme_run_fixture(COMMANDS, "reader_plugin")


def test_src_never_names_the_plugin():
    assert_src_never_names(PLUGIN_NAMES)


def test_readme_commands_train_evaluate_and_sweep_the_plugin(readme_run):
    root, _ = readme_run
    (train,) = sorted((root / "outputs" / "reader_quickstart").iterdir())
    figures = _metrics(train)
    assert {row["method"] for row in figures["rows"]} == {"CandidateRanker", "retrieval"}
    assert set(figures["metrics"]) == {"base_retrieved", "finetuned_retrieved"}
    assert figures["train"]["steps"] == 16 and figures["train"]["resumed_from"] is None
    assert (train / "adapter" / "ranker.pt").is_file() and (train / "checkpoints" / "last.ckpt").is_file()
    assert json.loads((train / "run.json").read_text())["status"] == "finished"
    trained = figures["metrics"]["finetuned_retrieved"]["all"]["metrics"]
    untrained = figures["metrics"]["base_retrieved"]["all"]["metrics"]
    alone = figures["retrieval_answers"]["all"]["metrics"]
    assert trained["hit@1"] > untrained["hit@1"] and trained["hit@1"] > alone["hit@1"]  # it learnt, and adds
    # eval.py scores the trained ranker of that run: the same figures
    (evaluated,) = sorted((root / "outputs" / "eval").iterdir())
    note = json.loads((evaluated / "eval.json").read_text())
    assert note["method"] == "reader" and note["checkpoint"] == str(train / "adapter")
    assert _metrics(evaluated)["metrics"]["finetuned_retrieved"] == figures["metrics"]["finetuned_retrieved"]
    # one table: the plugin next to the built-in reader, each with the evidence answering alone
    (sweep,) = sorted((root / "multirun" / "reader_quickstart").iterdir())
    table = (sweep / "aggregate.md").read_text()
    assert "| qa.reading.method |" in table, table
    for method in ("CandidateRanker", "retrieval"):
        assert f"| {method} |" in table, table
    swept = [_metrics(p) for p in sweep.iterdir() if (p / "metrics.json").is_file()]
    ranker = next(m for m in swept if m["rows"][0]["method"] == "CandidateRanker")
    assert ranker["metrics"] == figures["metrics"]  # the sweep point trains the same way


def test_sigterm_mid_training_then_resume_matches_the_uninterrupted_run(readme_run):
    root, env = readme_run
    (train,) = sorted((root / "outputs" / "reader_quickstart").iterdir())
    run = root / "killed"
    args = [
        "+experiment=reader_quickstart",
        "qa.reading.method=candidate-ranker",
        "checkpoint_every_n_steps=1",
        f"hydra.run.dir={run}",
    ]
    stop_then_resume(root, env, run, args, "candidate_ranker.reader:RankerModule.training_step", "9")
    again = _metrics(run)
    assert in_run(run, again["train"]["resumed_from"]) == run / "checkpoints" / "last.ckpt"
    assert again["metrics"] == _metrics(train)["metrics"]


@pytest.mark.parametrize(
    "option, says",
    [
        ("+qa.reading.options.hidden=0", "error: reader 'candidate-ranker': hidden must be >= 1, got 0"),
        ("qa.reading.method=candidate-rankr", "error: unknown reader 'candidate-rankr'; registered: candidate-ranker"),
    ],
    ids=["its own option", "a misspelt name"],
)
def test_a_mistake_is_one_line(readme_run, option, says):
    root, env = readme_run
    args = ["+experiment=reader_quickstart", "qa.reading.method=candidate-ranker", option]
    before = sorted(p for p in (root / "outputs").rglob("*") if p.is_dir())
    proc = _run([sys.executable, "train.py", *args], root, env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(says), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert sorted(p for p in (root / "outputs").rglob("*") if p.is_dir()) == before  # no refused run folder left
