"""GSR on the one retriever path: ``python train.py +experiment=retrieve retriever=gsr`` trains GSR with
the run's Trainer and scores it as every retriever (results file, recall, metrics.json), its chain
figures beside recall; ``eval.py`` scores the run folder again (either decoding mode); a SIGTERM
mid-training stops it at a resumable step and ``resume=auto`` ends it exactly like the uninterrupted
run; what the retrieve experiment names its own way, or GSR does not read, is one line and exit 2.

Tiny synthetic world (16 training questions), the tiny T5, two epochs of batch 4: about 20 s a run.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gsr_train.commands.gsr_table import collect_metrics
from gsr_train.eval.tail import in_run

from .conftest import REPO, offline_env, quiet
from .test_experiments_e2e import SYNTHETIC

pytestmark = [pytest.mark.integration]

ARGS = [
    "+experiment=retrieve",
    "retriever=gsr",
    "model.epochs=2",
    "model.batch_size=4",
    "retriever.options.decode.top_n=2",
    "+retriever.options.max_val_questions=4",
    *quiet("csv"),
    *SYNTHETIC,
]


def _env(cache: Path) -> dict:
    return offline_env(cache, quiet=True)


def _run(script: str, *args: str, cache: Path, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *prefix, script, *args], cwd=REPO, env=_env(cache), capture_output=True, text=True, timeout=600
    )


def _metrics(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def _row(folder: Path) -> dict:
    (row,) = _metrics(folder)["rows"]
    return row


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("gsr_retrieve")
    done = _run("train.py", *ARGS, f"hydra.run.dir={root / 'run'}", cache=root / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def test_retrieve_trains_gsr_and_scores_it_like_every_retriever(trained):
    run = trained / "run"
    figures = _metrics(run)
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    row = _row(run)
    assert row["method"] == "gsr" and row["mode"] == "unconstrained" and row["k"] == 100
    metrics = row["metrics"]
    assert {"sp_recall", "answer_recall", "sp_recall@10", "match@1", "match@2", "end_match@1"} <= set(metrics)
    assert all(0.0 <= v <= 1.0 for v in metrics.values())
    assert figures["unconstrained"]["chain_match"]["match@1"] == metrics["match@1"]  # the chain report, whole
    training = figures["training"]
    assert training["epochs_run"] == 2 and training["global_step"] == training["total_steps"] > 2
    assert in_run(run, figures["checkpoint"]).is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    assert (run / "model" / "gsr_config.json").is_file() and in_run(run, figures["model_folder"]) == run / "model"
    rows = [json.loads(line) for line in gzip.open(run / "results_test.jsonl.gz", "rt").read().splitlines()]
    assert len(rows) == 6 and all({"id", "triples", "scores", "chains", "paths", "beams"} <= set(r) for r in rows)
    # a triple scores the best kept chain through it; at most top_n chains are kept per question
    assert all(len({tuple(c["chain"]) for c in r["chains"]}) <= 2 for r in rows)
    assert any(r["triples"] for r in rows) and all(r["scores"] == sorted(r["scores"], reverse=True) for r in rows)
    assert (run / "csv").is_dir()  # the run's loggers, as for every trainer
    (table_row,) = collect_metrics(run)  # gsr-train gsr-table reads it as a GSR experiment's run
    assert table_row["mode"] == "unconstrained" and table_row["match@1"] == metrics["match@1"]


def test_eval_scores_the_run_folder_in_either_decoding_mode(trained):
    again = trained / "eval"
    done = _run("eval.py", f"ckpt_path={trained / 'run'}", f"hydra.run.dir={again}", cache=trained / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    note = json.loads((again / "eval.json").read_text())
    assert note["method"] == "retrieve" and Path(note["checkpoint"]) == in_run(
        trained / "run", _metrics(trained / "run")["checkpoint"]
    )
    assert _row(again)["metrics"] == _row(trained / "run")["metrics"]  # the same checkpoint on the same split
    constrained = trained / "eval_constrained"
    done = _run(
        "eval.py",
        f"ckpt_path={trained / 'run' / 'model'}",
        "+retriever.options.decode.constrained=true",  # eval.py composes eval.yaml: a run's own sections take a +
        f"hydra.run.dir={constrained}",
        cache=trained / "cache",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = _metrics(constrained)
    assert _row(constrained)["mode"] == "constrained" and figures["constrained"]["decode"]["constrained"] is True
    assert figures["constrained"]["validity"]["valid_fraction"] == 1.0  # every constrained beam executes


def test_sigterm_mid_training_then_resume_matches_the_uninterrupted_run(trained):
    run = trained / "killed"
    args = [*ARGS, f"hydra.run.dir={run}"]
    signal_at = ("-m", "tests.signal_at", "gsr_train.models.gsr.module:GSRModule.training_step", "3", "TERM")
    stopped = _run("train.py", *args, cache=trained / "cache", prefix=signal_at)
    assert stopped.returncode == 128 + 15, stopped.stderr[-3000:]
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    assert "resume=auto" in stopped.stderr and (run / "checkpoints" / "last.ckpt").is_file()
    resumed = _run("train.py", *args, "resume=auto", cache=trained / "cache")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    full = _metrics(trained / "run")
    assert _metrics(run)["training"]["global_step"] == full["training"]["global_step"]
    assert _row(run)["metrics"] == _row(trained / "run")["metrics"]
    assert _metrics(run)["unconstrained"]["chain_match"] == full["unconstrained"]["chain_match"]


@pytest.mark.parametrize(
    "extra,message",
    [
        (["+retriever.options.decod=3"], "retriever.options.decod: not a GSRRetrieverOptions option"),
        (["+retriever.options.eval_modes=[constrained]"], "retriever.options.eval_modes: on +experiment=retrieve"),
        (["retriever.train.epochs=3"], "retriever.train.epochs=3: retriever.train is the triple scorers' recipe"),
        (["val_split=null"], "train_split=train val_split=None: retriever=gsr trains on the train split"),
    ],
)
def test_mistakes_are_one_line_before_any_work(tmp_path, extra, message):
    done = _run("train.py", *ARGS, *extra, f"hydra.run.dir={tmp_path / 'run'}", cache=tmp_path / "cache")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert message in done.stderr.strip().splitlines()[-1], done.stderr[-2000:]
    assert not (tmp_path / "cache").exists()  # nothing was built


def test_eval_refuses_gsr_with_nothing_trained(tmp_path):
    done = _run("eval.py", "+experiment=retrieve", "retriever=gsr", cache=tmp_path / "cache")
    assert done.returncode == 2 and "is trainable: eval.py scores a trained one" in done.stderr
    assert "Traceback" not in done.stderr
