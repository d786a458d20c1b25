"""A split the run needs must give it something to do, checked before training: an empty or
unanswerable split is an error naming it; training without validation is an explicit choice.
Also: results name the data actually read, and ``data.labels`` can be cleared."""

from __future__ import annotations

import gzip
import json

import pytest

from gsr_train.data.errors import PreflightError
from gsr_train.runtime.run_data import label_path

from .conftest import compose_config
from .subgraphrag_toy import toy_run_overrides


def _cfg(tmp_path, **settings):
    return compose_config(toy_run_overrides(tmp_path, settings=settings))


def _rewrite(path, change):
    with gzip.open(path, "rt") as f:
        rows = [json.loads(x) for x in f]
    rows = change(rows)
    with gzip.open(path, "wt") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def test_empty_test_split_is_an_error_naming_it(tmp_path):
    from gsr_train.runs.subgraphrag import run

    cfg = _cfg(tmp_path)
    _rewrite(tmp_path / "data" / "test.jsonl.gz", lambda rows: [])
    with pytest.raises(PreflightError, match="the evaluation split 'test' of toy is empty"):
        run(cfg)
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing trained


def test_unanswerable_test_split_is_an_error(tmp_path):
    from gsr_train.runs.subgraphrag import run

    cfg = _cfg(tmp_path)
    _rewrite(tmp_path / "data" / "test.jsonl.gz", lambda rows: [{**r, "a_entity": ["Nowhere"]} for r in rows])
    with pytest.raises(
        PreflightError, match="'test' of toy: none of its 8 questions has an answer entity in its graph"
    ):
        run(cfg)


def test_validation_without_paths_fails_before_training_and_null_trains_without_it(tmp_path):
    from gsr_train.runs.subgraphrag import run

    cfg = _cfg(tmp_path)
    # answers present in the graphs but unreachable from the topic: no shortest path, no positive
    _rewrite(
        tmp_path / "data" / "validation.jsonl.gz", lambda rows: [{**r, "q_entity": ["Isolated topic"]} for r in rows]
    )
    with pytest.raises(
        PreflightError,
        match=r"validation split 'validation' of toy: .*no positive triple.*"
        r"subgraphrag.val_split=null",
    ):
        run(cfg)
    assert not (tmp_path / "run" / "checkpoints").exists()
    figures = run(_cfg(tmp_path, **{"subgraphrag.val_split": "null"}))
    assert figures["training"]["epochs_run"] >= 1 and figures["training"]["monitor"] is None
    assert figures["at_k"]["answer_recall"] is not None


def test_results_name_the_data_actually_read(tmp_path):
    cfg = compose_config(["+experiment=subgraphrag_quickstart", f"data.dir={tmp_path / 'my_kg'}"])
    assert cfg.data.name == "my_kg"
    cfg = compose_config(["+experiment=subgraphrag_quickstart", f"data.dir={tmp_path / 'my_kg' / 'data'}"])
    assert cfg.data.name == "my_kg"  # a generic folder name: its parent's
    assert compose_config(["+experiment=subgraphrag_quickstart"]).data.name == "synthetic"
    assert compose_config(["+experiment=subgraphrag_webqsp_mini"]).data.name == "webqsp_mini"
    assert compose_config(["+experiment=subgraphrag_webqsp_mini", "data.name=mine"]).data.name == "mine"
    assert compose_config(["+experiment=subgraphrag_webqsp", "data.dir=org/other-kg"]).data.name == "other-kg"


def test_toy_run_results_carry_name_and_fingerprint(tmp_path):
    from gsr_train.runs.subgraphrag import run

    overrides = [
        o for o in toy_run_overrides(tmp_path, settings={"model.train.epochs": 1}) if not o.startswith("data.name=")
    ]
    figures = run(compose_config(overrides))
    assert figures["data"] == tmp_path.name  # the toy folder is <tmp>/data: a generic name, so its parent's
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["data"] == tmp_path.name and len(saved["data_fingerprint"]) >= 8


def test_labels_can_be_cleared_and_follow_the_folder(webqsp_mini, tmp_path):
    base = ["+experiment=subgraphrag_webqsp_mini"]
    assert label_path(compose_config(base), "test").endswith("webqsp_mini/gpt_triples_test.jsonl.gz")
    assert label_path(compose_config([*base, "data.labels={}"]), "test") is None
    assert label_path(compose_config([*base, "data.labels=null"]), "test") is None
    assert label_path(compose_config([*base, f"data.dir={tmp_path}"]), "test") is None  # no label files there
    given = compose_config([*base, f"data.labels={{test: {tmp_path / 'l.jsonl'}}}"])
    assert label_path(given, "test") == str(tmp_path / "l.jsonl")
