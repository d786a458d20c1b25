"""GSR on chain files (``data.format=paths``): the graphs folder is an ordinary option of every
data preset (``data.graphs=FOLDER``, no ``+``), eval.py on other chain files does not decode
against the training run's graphs, and a question with no graph is an error unless the user
asks to leave such questions out or keep them as misses (``data.questions_without_graph=skip|keep``)."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
from omegaconf import OmegaConf

from gsr_train.data.errors import PreflightError

from .conftest import compose_config
from .test_eval_cli import eval_cfg, save_run_config
from .test_experiments_e2e import GSR_SMALL, paths_cut

pytestmark = pytest.mark.integration


def _ids(path):
    with gzip.open(path, "rt") as f:
        return [json.loads(line)["id"] for line in f]


@pytest.fixture
def gsr_run(tmp_path, shared_data):
    """A GSR run folder on the real webqsp_paths chains (an untrained tiny model: what is tested is
    which graphs the evaluation reads, not how good the model is)."""
    from gsr_train.models.gsr.modeling import build_gsr_model

    chains, graphs = paths_cut(tmp_path, shared_data)
    run_dir = tmp_path / "gsr_run"
    cfg = compose_config(
        [
            "+experiment=gsr_webqsp_paths",
            f"data.dir={chains}",
            f"data.graphs={graphs}",
            "data.graph_splits=[test]",
            "data.questions_without_graph=error",
            f"paths.output_dir={run_dir}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            "model=gsr_tiny",
            *GSR_SMALL,
        ]
    )
    relations = sorted({r for row in _rows(chains / "train.jsonl.gz") for p in row.get("ground_paths", []) for r in p})
    build_gsr_model(OmegaConf.to_container(cfg.model, resolve=True), relations).save_pretrained(run_dir / "model")
    save_run_config(run_dir, cfg, "gsr_webqsp_paths")
    new_chains = tmp_path / "new_chains"  # another chain folder: only a test split, every question with a graph
    new_chains.mkdir()
    with_graph = set(_ids(graphs / "test.jsonl.gz"))
    with gzip.open(new_chains / "test.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in _rows(chains / "test.jsonl.gz") if r["id"] in with_graph)
    return run_dir, new_chains, graphs


def _rows(path):
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def _eval(tmp_path, run_dir, *overrides):
    from gsr_train.runs.evaluate_run import run

    out = tmp_path / "eval"
    shutil.rmtree(out, ignore_errors=True)
    run(eval_cfg(tmp_path, out, f"ckpt_path={run_dir}", *overrides), list(overrides))
    return json.loads((out / "metrics.json").read_text())


def test_new_chain_files_need_their_graphs_named(tmp_path, gsr_run):
    run_dir, chains, graphs = gsr_run
    # the training run's graphs folder is not silently reused for other data
    with pytest.raises(PreflightError, match="data.graphs is not set"):
        _eval(tmp_path, run_dir, f"data.dir={chains}")
    figures = _eval(tmp_path, run_dir, f"data.dir={chains}", f"data.graphs={graphs}")  # no `+` needed
    n = len(_ids(chains / "test.jsonl.gz"))
    assert figures["data"]["eval_questions"] == figures["data"]["eval_with_graph"] == n
    assert figures["data"]["eval_without_graph"] == 0


def test_a_question_without_graph_is_an_error_unless_skipped(tmp_path, gsr_run):
    run_dir, chains, graphs = gsr_run
    rows = _rows(graphs / "test.jsonl.gz")
    fewer = tmp_path / "fewer_graphs"
    fewer.mkdir()
    with gzip.open(fewer / "test.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows[3:])  # three questions lose their graph
    n = len(_ids(chains / "test.jsonl.gz"))
    with pytest.raises(
        PreflightError,
        match=rf"3 of {n} evaluation questions .* have no graph .*"
        "data.questions_without_graph=skip",
    ):
        _eval(tmp_path, run_dir, f"data.dir={chains}", f"data.graphs={fewer}")
    figures = _eval(
        tmp_path, run_dir, f"data.dir={chains}", f"data.graphs={fewer}", "data.questions_without_graph=skip"
    )
    assert figures["data"]["eval_without_graph"] == 3
    assert figures["data"]["eval_questions"] == figures["data"]["eval_with_graph"] == n - 3
    figures = _eval(
        tmp_path, run_dir, f"data.dir={chains}", f"data.graphs={fewer}", "data.questions_without_graph=keep"
    )
    assert figures["data"]["eval_without_graph"] == 3
    assert figures["data"]["eval_questions"] == n and figures["data"]["eval_with_graph"] == n - 3
