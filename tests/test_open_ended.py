"""OKGQA's open-ended evaluation end to end against a scripted judge (tests/open_ended_helpers.py):
every figure below follows from the script, so each one is asserted exactly."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gsr_train.llm.server import ScriptedBackend, serve_in_thread

from .conftest import compose_config
from .open_ended_helpers import judge
from .patterns_helpers import tiny_dataset

QUESTIONS = [
    {
        "id": "o1",
        "graph_id": "q1",
        "question": "What do you know about Richard Nixon?",
        "type": "descriptive",
        "entities": ["Richard Nixon"],
        "source": "template",
    },
    {
        "id": "o2",
        "graph_id": "q2",
        "question": "What do you know about Yorba Linda?",
        "type": "descriptive",
        "entities": ["Yorba Linda"],
        "source": "template",
    },
]


def _run_args(tmp_path, url) -> list[str]:
    """The overrides every run here takes: the tiny dataset and its questions, the hashing encoder,
    the scripted judge (no autostart), K=2, two G-Eval samples."""
    data = tiny_dataset(tmp_path / "data")
    qfile = tmp_path / "questions.jsonl"
    qfile.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return [
        "+experiment=okgqa_open_ended",
        f"data.dir={data}",
        "data.splits=[test]",
        "encoder.name=hashing",
        "+encoder.dim=32",
        "logger=none",
        f"llm.base_url={url}",
        "llm.model=scripted",
        "llm.autostart=null",
        f"open_ended.questions={qfile}",
        "top_k=2",
        "open_ended.geval.samples=2",
    ]


def _config(tmp_path, url, *extra):
    base = [
        *_run_args(tmp_path, url),
        f"paths.output_dir={tmp_path / 'run'}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "experiment_name=okgqa_open_ended",
    ]
    keys = {e.split("=", 1)[0] for e in extra}
    return compose_config([o for o in base if o.split("=", 1)[0] not in keys] + list(extra))


def test_open_ended_run_gives_exact_figures_and_resumes_from_the_cache(tmp_path, caplog):
    from gsr_train.runs.experiment import run_experiment

    with serve_in_thread(ScriptedBackend(judge), "scripted") as srv:
        cfg = _config(tmp_path, srv.base_url)
        with caplog.at_level("INFO", logger="gsr_train.runs.open_ended"):
            details = run_experiment(cfg)
        assert f"open_ended.questions={tmp_path / 'questions.jsonl'}: 2 of 2 questions used" in caplog.messages
        asked = srv.stats.received
        out = tmp_path / "run"
        cond = details["conditions"]
        closed, ev = cond["none"], cond["triplets"]
        # closed book: two invented facts per answer, none in the graph; triplets: two stated triples
        assert closed["answered"] == ev["answered"] == 2
        assert closed["llm"]["hallucination_ratio"] == 1.0 and closed["llm"]["facts"] == 4
        assert ev["llm"]["hallucination_ratio"] == 0.0 and ev["llm"]["factscore_no_penalty"] == 1.0
        # FActScore's length penalty: 2 facts < gamma=10 -> exp(1 - 10/2)
        assert ev["llm"]["factscore"] == pytest.approx(math.exp(1 - 10 / 2))
        assert ev["agreement"]["facts"] == 4
        # G-Eval: correctness from log-probabilities (0.8 * 4 + 0.2 * 5), the others from 2 samples of "3"
        assert ev["geval"]["correctness"] == pytest.approx(4.2)
        assert ev["geval"]["comprehensiveness"] == 3.0
        assert ev["geval_method"] == {"samples": 6, "logprobs": 2}
        # a closed-book empowerment rating is malformed JSON: counted, not scored
        assert closed["counts"]["geval"]["samples_malformed_json"] == 4
        assert closed["counts"]["geval"]["malformed_json"] == 2 and closed["geval"]["empowerment"] is None
        # the calibration ran first, with both verifiers; metrics.json holds every condition and the usage
        doc = json.loads((out / "metrics.json").read_text())
        assert {r["condition"] for r in doc["rows"]} == {"none", "triplets"}
        assert doc["calibration"]["llm"]["auc"] is not None and "encoder" in doc["calibration"]
        assert doc["llm_usage"]["answer"]["fresh"] == 4 and doc["llm_usage"]["verify_llm"]["requests"] == 8
        rows = [json.loads(x) for x in (out / "open_ended_test.jsonl").read_text().splitlines()]
        assert len(rows) == 4
        nixon = next(r for r in rows if r["id"] == "o1" and r["condition"] == "none")
        assert nixon["unsupported"]["llm"] == [
            "Richard Nixon was born on the Moon.",
            "Richard Nixon won seven Olympic medals.",
        ]
        assert "FActScore" in (out / "open_ended.md").read_text()
        # every headline figure with its 95% interval over the questions: here each answer scores alike,
        # so the interval is the figure itself; the rows and the table carry it
        assert closed["intervals"]["hallucination_llm"] == [1.0, 1.0]
        assert ev["intervals"]["factscore_llm"] == pytest.approx([math.exp(-4)] * 2)
        assert ev["intervals"]["geval_correctness"] == pytest.approx([4.2, 4.2])
        assert "geval_empowerment" not in closed["intervals"]  # no rating read: no figure, no interval
        row = next(r for r in doc["rows"] if r["condition"] == "triplets")
        assert row["intervals"]["geval_correctness"] == pytest.approx([4.2, 4.2])
        assert "| 0.000 (0.00-0.00) |" in (out / "open_ended.md").read_text()

        # the same run again (resume=auto on a finished folder is refused; a fresh folder asks nothing new)
        cfg2 = _config(tmp_path, srv.base_url, f"paths.output_dir={tmp_path / 'run2'}")
        again = run_experiment(cfg2)
        assert srv.stats.received == asked
        assert again["conditions"]["triplets"]["llm"] == ev["llm"]
        assert again["llm_usage"]["answer"]["cached"] == 4


def test_case_values_give_the_condition_figures_and_their_intervals():
    """The per-answer parts behind a condition's FActScore, hallucination ratio, agreement and G-Eval
    give back the figures _figures reports (so the intervals are of those figures), each interval holds
    its figure, and the same cases give the same intervals."""
    import random
    from types import SimpleNamespace

    from gsr_train.openended.pipeline import JudgeOptions, _figures, case_values
    from gsr_train.openended.stages import Case

    rng = random.Random(0)
    cases = [
        Case(
            f"q{i}|triplets", "q?", [], None if i % 9 == 0 else "answer", [f"f{j}" for j in range(rng.randrange(0, 6))]
        )
        for i in range(60)
    ]
    pairs = [(ci, fi) for ci, c in enumerate(cases) for fi in range(len(c.facts))]
    enc = np.asarray([rng.random() for _ in pairs])
    llm = [None if rng.random() < 0.1 else rng.random() for _ in pairs]
    ratings = {
        (c.key, crit): SimpleNamespace(
            value=None if rng.random() < 0.2 else rng.choice([1, 2, 3, 4, 5]), method="samples"
        )
        for c in cases
        for crit in ("correctness", "empowerment")
    }
    opts = JudgeOptions()
    opts.geval.criteria = ("correctness", "empowerment")
    figures = _figures(cases, pairs, enc, llm, ratings, 0.5, opts)
    verdicts = {"encoder": [bool(v >= 0.5) for v in enc], "llm": [None if v is None else bool(v >= 0.5) for v in llm]}
    values = case_values(cases, pairs, verdicts, ratings, opts)
    got = values.values()
    for v in ("encoder", "llm"):
        assert got[f"factscore_{v}"] == pytest.approx(figures[v]["factscore"])
        assert got[f"factscore_no_penalty_{v}"] == pytest.approx(figures[v]["factscore_no_penalty"])
        assert got[f"hallucination_{v}"] == pytest.approx(figures[v]["hallucination_ratio"])
    assert got["verifier_agreement"] == pytest.approx(figures["agreement"]["agreement"])
    assert got["geval_correctness"] == pytest.approx(figures["geval"]["correctness"])
    for name, v in got.items():
        low, high = figures["intervals"][name]
        assert low <= v <= high and high > low, name
    assert case_values(cases, pairs, verdicts, ratings, opts).intervals() == values.intervals()


def test_open_ended_options_are_checked_before_any_work(tmp_path):
    from gsr_train.runs.open_ended import OpenEndedOptionError, run_open_ended

    for bad, message in (
        ("open_ended.forms=[none,graphs]", "unknown form"),
        ("open_ended.verifiers=[encoder,oracle]", "verifiers"),
        ("open_ended.knowledge=missing.txt", "knowledge=missing.txt"),
        ("open_ended.geval.criteria=[fluency]", "fluency"),
        (f"open_ended.questions={tmp_path / 'none.jsonl'}", "no such file"),
    ):
        cfg = _config(tmp_path, "http://127.0.0.1:9/v1", bad)
        with pytest.raises(OpenEndedOptionError, match=message):
            run_open_ended(cfg)


def _train_cli(tmp_path, url, run, *extra):
    """``python train.py +experiment=okgqa_open_ended ...`` as a user runs it (a subprocess)."""
    import os
    import subprocess
    import sys

    from .conftest import REPO

    args = [*_run_args(tmp_path, url), f"hydra.run.dir={run}", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    env["GSR_TRAIN_CACHE"] = str(tmp_path / "cache")
    return subprocess.Popen(
        [sys.executable, "train.py", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.integration
def test_killed_open_ended_run_resumes_asking_only_what_was_not_answered(tmp_path):
    """kill -9 while the judge is answering, then ``resume=auto``: the answers that arrived before the
    kill come from the cache, the rest are asked, and the figures equal an uninterrupted run's."""
    import time

    run = tmp_path / "run"
    backend = ScriptedBackend(judge, block_after=10)
    with serve_in_thread(backend, "scripted") as srv:
        proc = _train_cli(tmp_path, srv.base_url, run)
        deadline = time.time() + 120
        while not (srv.stats.completed >= 10 and srv.stats.received > 10) and time.time() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.1)
        time.sleep(1.0)  # the client commits each answer to the cache as it arrives
        proc.kill()
        proc.communicate()
        assert json.loads((run / "run.json").read_text())["status"] == "running"  # what a killed run leaves
        backend.release()
        resumed = _train_cli(tmp_path, srv.base_url, run, "resume=auto")
        out, err = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, err[-3000:]
        doc = json.loads((run / "metrics.json").read_text())
        usage = doc["llm_usage"]
        assert sum(stage["cached"] for stage in usage.values()) == 10
        fresh_after_kill = sum(stage["fresh"] for stage in usage.values())

    with serve_in_thread(ScriptedBackend(judge), "scripted") as srv2:
        clean = tmp_path / "clean"
        (clean / "cache").mkdir(parents=True)
        whole = _train_cli(clean, srv2.base_url, clean / "run")
        whole.communicate(timeout=300)
        assert whole.returncode == 0
        assert srv2.stats.completed == fresh_after_kill + 10  # the resumed run asked only what was missing
    expected = json.loads((clean / "run" / "metrics.json").read_text())
    assert doc["rows"] == expected["rows"]


def test_readme_open_ended_commands_compose_and_pass_the_recipe_as_written():
    """Each ``python train.py`` line of docs/how-to/open-ended-evaluation.md's first block, composed
    exactly as written (running them is the e2e tests' job, at a small size) and checked like
    run_experiment does."""
    import shlex

    from gsr_train.options.check import check_recipe

    from .doc_blocks import blocks

    block = blocks("docs/how-to/open-ended-evaluation.md")[0]
    commands = [shlex.split(line.split("#", 1)[0]) for line in block.splitlines() if line.startswith("python train.py")]
    assert len(commands) == 4
    runners = []
    for words in commands:
        cfg = compose_config(words[2:])
        check_recipe(cfg)
        runners.append(cfg.runner)
    assert runners == ["open_ended", "judge_calibration", "open_ended_perturbed", "open_ended"]
    assert list(cfg.open_ended.forms) == ["none", "triplets", "paths", "subgraphs"] and cfg.llm.model == "gpt-4o-mini"


@pytest.mark.integration
def test_an_unreachable_judge_is_one_line_before_any_work(tmp_path):
    """``llm.base_url=http://127.0.0.1:9/v1 llm.autostart=null``: nothing listens there. One line naming
    the URL and what to check, exit 2, before any embedding or request (it was a 64-line
    LLMRequestError traceback after every request's retries); the run folder says failed."""
    run = tmp_path / "run"
    proc = _train_cli(tmp_path, "http://127.0.0.1:9/v1", run)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 2, err[-3000:]
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: llm.base_url=http://127.0.0.1:9/v1: nothing listens at 127.0.0.1:9; check that an OpenAI-compatible "
        "server answers there (llm.base_url; gsr-train serve-llm starts the project's own), or set "
        "llm.autostart=smollm2 to serve the local model from the run"
    ]
    assert [line for line in err.splitlines() if not line.startswith("[")] == errors  # the rest: log lines
    assert json.loads((run / "run.json").read_text())["status"] == "failed"
    assert not (tmp_path / "cache" / "embeddings").exists()  # refused before the long work
