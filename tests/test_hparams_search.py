"""docs/how-to/hparams-search.md runs as written: an Optuna search over SubgraphRAG, killed with
SIGKILL in its second trial and continued by the same command (the trial that was running runs
again in its own folder, the others are not), then the GSR search; both end with the sweep table
and optuna.json. The objective is read from the trials' metrics.json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .test_readme_commands import _argv, _block, _checkout, _env, _run, cache  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PAGE = "docs/how-to/hparams-search.md"


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 600) -> None:
    t0 = time.time()
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() - t0 < timeout, f"{path} did not appear"
        time.sleep(0.2)


def test_the_pages_searches_run_and_a_killed_one_continues(tmp_path, cache):
    cwd = _checkout(tmp_path / "checkout")
    sgr, gsr = _block(PAGE, "+hparams_search=subgraphrag_optuna")
    search = cwd / "multirun" / "hparams_search" / "subgraphrag_quickstart"
    proc = subprocess.Popen(_argv(sgr, cwd), cwd=cwd, env=_env(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(search / "1" / "run.json", proc)  # the second trial started: kill the whole search
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert not (search / "optuna.json").exists() and not (search / "2").exists()

    done = _run(sgr, cwd, _env(cache))  # the same command continues it
    assert done.returncode == 0, done.stderr[-3000:]
    assert "setup plugin alembic" not in done.stdout + done.stderr  # Optuna's storage says nothing
    result = json.loads((search / "optuna.json").read_text())
    assert [(t["trial"], t["state"]) for t in result["trials"]] == [(0, "COMPLETE"), (1, "COMPLETE"), (2, "COMPLETE")]
    assert json.loads((search / "0" / "run.json").read_text())["attempts"] == 1  # finished: not run again
    assert json.loads((search / "1" / "run.json").read_text())["attempts"] == 2  # killed: run again, in place
    for trial in result["trials"]:  # each value is its run's metrics.json figure
        rows = json.loads((search / str(trial["trial"]) / "metrics.json").read_text())["rows"]
        assert trial["value"] == rows[0]["metrics"]["answer_recall@10"]
    assert len({json.dumps(t["params"], sort_keys=True) for t in result["trials"]}) == 3  # no point asked twice
    best = max(result["trials"], key=lambda t: t["value"])
    assert result["best"] == {"trial": best["trial"], "value": best["value"], "params": best["params"]}
    assert set(best["params"]) == {"model.hidden", "model.dropout", "model.train.optim.lr"}
    table = (search / "aggregate.md").read_text()
    assert "| model.hidden | model.dropout | model.train.optim.lr |" in table and table.count("| subgraphrag |") == 3
    assert (search / "aggregate_recall.png").is_file()
    assert table.count("| best trial |") == 2  # its subgraphrag and cosine rows
    assert f"## Optuna search (answer_recall@10, maximize; best: trial {best['trial']}, answer_recall@10 = " in table

    done = _run(gsr, cwd, _env(cache))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((cwd / "multirun" / "hparams_search" / "retrieve_gsr" / "optuna.json").read_text())
    assert [t["state"] for t in result["trials"]] == ["COMPLETE", "COMPLETE"] and result["best"]["value"] >= 0
    assert set(result["best"]["params"]) == {"model.optim.lr", "model.batch_size"}


@pytest.mark.parametrize(
    "space, says",
    [
        ("model.dropout=interval(0.5,0.1)", "The `low` value must be smaller than or equal to the `high` value"),
        # the edge an option refuses is found first, by the recipe (gsr_train.options.sweep_points)
        ("model.train.optim.lr=tag(log,interval(0,0.01))", "model.train.optim.lr=0.0, the interval's lower end"),
    ],
)
def test_a_search_space_optuna_cannot_sample_is_one_line_before_the_study(tmp_path, space, says):
    """A reversed interval or the log of 0 (issue 49, probe 3): one line naming hydra.sweeper.params,
    exit 2, and no study or trial folder (it was a traceback)."""
    import sys

    from .conftest import REPO

    argv = [sys.executable, str(REPO / "train.py"), "-m", "+experiment=subgraphrag_quickstart"]
    argv += ["+hparams_search=subgraphrag_optuna", space, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "GSR_TRAIN_CACHE": str(tmp_path / "c")}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: hydra.sweeper.params: ") and says in line and "Traceback" not in done.stderr
    assert not (tmp_path / "sweep" / "optuna.db").exists()
