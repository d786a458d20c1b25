"""A grid sweep checks every point before the first runs (issue 49, probe 4): a mistake in its last
point is one line naming the point, exit status 2, nothing trained and no sweep folder made."""

from __future__ import annotations

import subprocess

import pytest
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # the order sweep_points must follow
from hydra.core.override_parser.overrides_parser import OverridesParser

from gsr_train.options.sweep_points import search_edges, sweep_points

from .conftest import SHARED_DATA
from .test_compare_runs_doc import _argv
from .test_readme_commands import _checkout, _env


@pytest.mark.parametrize(
    "overrides",
    [
        ["+experiment=subgraphrag_quickstart", "model.hidden=64,0"],
        ["a=1,2", "b=x,y,z", "c=3"],
        ["seed=range(0,3)", "+experiment=cosine_baseline", "top_k=10,20"],
    ],
)
def test_points_are_the_basic_sweepers_jobs_in_its_order(overrides):
    parsed = OverridesParser.create().parse_overrides(overrides)
    (jobs,) = BasicSweeper.split_arguments(parsed, None)
    assert sweep_points(overrides) == [list(job) for job in jobs]


def test_an_interval_is_a_search_space_not_a_grid():
    assert sweep_points(["lr=interval(0.001,0.1)", "a=1,2"]) == []


@pytest.mark.integration
def test_a_bad_last_point_is_refused_before_the_first_runs(tmp_path, user_cache):
    cwd = _checkout(tmp_path / "checkout")
    line = "python train.py -m +experiment=subgraphrag_quickstart model.hidden=64,0"
    done = subprocess.run(_argv(line), cwd=cwd, env=_env(user_cache), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "error: sweep point 1 of 2 (model.hidden=0): model.hidden=0: expected >= 1 "
        "(conf/model/subgraphrag.yaml); nothing ran"
    ]
    assert not (cwd / "multirun").exists() and not (cwd / "outputs").exists()


@pytest.mark.integration
def test_a_missing_data_folder_of_the_last_point_is_refused_before_the_first_runs(tmp_path, user_cache):
    """A grid over data folders: each point's folder and split files are checked before any point runs."""
    cwd = _checkout(tmp_path / "checkout")
    line = f"python train.py -m +experiment=subgraphrag_quickstart data.dir={SHARED_DATA / 'webqsp_mini'},./nowhere"
    done = subprocess.run(_argv(line), cwd=cwd, env=_env(user_cache), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "error: sweep point 1 of 2 (data.dir=./nowhere): data.dir=./nowhere does not exist; nothing ran"
    ]
    assert not (cwd / "multirun").exists() and not (cwd / "outputs").exists()


def test_a_search_spaces_edges_are_its_choices_and_interval_ends():
    params = {"model.hidden": "choice(64, 128)", "model.dropout": "interval(0.0, 0.5)"}
    edges = search_edges(params, ["+experiment=subgraphrag_quickstart", "model.dropout=tag(log, interval(0.1, 0.4))"])
    assert [what for what, _ in edges] == [
        "model.hidden=64, one of its choices",
        "model.hidden=128, one of its choices",
        "model.dropout=0.1, the interval's lower end",  # the command line's space wins over the file's
        "model.dropout=0.4, its upper end",
    ]
    assert edges[1][1] == ["+experiment=subgraphrag_quickstart", "model.hidden=128"]
    assert edges[2][1] == ["+experiment=subgraphrag_quickstart", "model.dropout=0.1"]


@pytest.mark.integration
def test_a_search_bound_the_option_refuses_is_one_line_before_the_study(tmp_path, user_cache):
    cwd = _checkout(tmp_path / "checkout")
    line = (
        "python train.py -m +experiment=subgraphrag_quickstart +hparams_search=subgraphrag_optuna "
        "model.hidden=int(interval(0,64))"
    )
    done = subprocess.run(_argv(line), cwd=cwd, env=_env(user_cache), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "error: hydra.sweeper.params: model.hidden=0, the interval's lower end: model.hidden=0: expected >= 1 "
        "(conf/model/subgraphrag.yaml); no study was made"
    ]
    assert not (cwd / "multirun").exists()
