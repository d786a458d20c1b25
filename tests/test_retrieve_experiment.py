"""``+experiment=retrieve``: any retriever through one path, by registered name, by import path
(a class outside gsr_train: ``tests/plugin_toy``) or by a package's entry point; a sweep over
retrievers ends with one table and one recall@K plot."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from gsr_train.retrievers.registry import RetrieverError, build, names

from .conftest import REPO
from .test_experiments_e2e import tiny  # noqa: F401 (the fixture)

pytestmark = pytest.mark.integration


def _train(cwd, *args):
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "GSR_TRAIN_CACHE": str(cwd / "cache"),
    }
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_one_sweep_compares_retrievers_in_one_table_and_plot(tiny, tmp_path):
    data = [f"data.dir={tiny['mini']}", "data.name=mini", "encoder.name=hashing", "+encoder.dim=32"]
    done = _train(tmp_path, "-m", "+experiment=retrieve", "retriever=cosine,ppr,classic-pcst", *data)
    assert done.returncode == 0, done.stderr[-3000:]
    sweep = next((tmp_path / "multirun" / "retrieve").iterdir())
    rows = list(csv.DictReader((sweep / "aggregate.csv").open()))
    assert [r["method"] for r in rows] == ["cosine", "ppr", "classic-pcst"]
    for r in rows:
        assert r["K"] == "100" and all(0 <= float(r[f"answer_recall@{k}"]) <= 1 for k in (10, 20, 50, 100))
        assert float(r["answer_recall@10"]) <= float(r["answer_recall@100"])
    assert (sweep / "aggregate_recall.png").read_bytes()[:4] == b"\x89PNG"


def test_a_retriever_outside_the_package_joins_by_import_path(tiny, tmp_path):
    data = [f"data.dir={tiny['mini']}", "data.name=mini", "encoder.name=hashing", "+encoder.dim=32"]
    plugin = "retriever._target_=tests.plugin_toy.TopicEdges"
    done = _train(
        tmp_path,
        "+experiment=retrieve",
        plugin,
        "+retriever.options.weight=2",
        *data,
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    doc = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert doc["rows"][0]["method"] == "topic-edges" and doc["extra"]["topic_edges"] > 0
    assert (tmp_path / "run" / "results_test.jsonl.gz").exists()
    # its own option check, and an unknown name, are one line each
    bad = _train(tmp_path, "+experiment=retrieve", plugin, "+retriever.options.weight=-1", *data)
    assert bad.returncode == 2 and "error: retriever._target_=tests.plugin_toy.TopicEdges: weight must be" in bad.stderr
    unknown = _train(tmp_path, "+experiment=retrieve", "retriever.name=nope", *data)
    assert unknown.returncode == 2 and "error: unknown retriever 'nope'; registered: " in unknown.stderr
    assert "Traceback" not in bad.stderr + unknown.stderr


def test_entry_points_of_installed_packages_register_their_retrievers(monkeypatch):
    import gsr_train.plugins as plugins
    import gsr_train.retrievers.registry as registry
    from gsr_train.retrievers.interface import REGISTRY

    class EntryPoint:
        name = "from-a-package"
        value = "a_package.retrievers:factory"

        @staticmethod
        def load():
            return lambda inputs, **options: _Fixed()

    class _Fixed:
        name = "from-a-package"

        def score(self, split):
            return None, {}

    def entry_points(group, name=None):  # importlib.metadata's selection by group (and name)
        return [EntryPoint()] if group == registry.REGISTRY.group and name in (None, EntryPoint.name) else []

    monkeypatch.setattr(plugins, "entry_points", entry_points)
    monkeypatch.delitem(REGISTRY, "from-a-package", raising=False)
    assert "from-a-package" in names()
    assert build("from-a-package", {}, None).name == "from-a-package"
    REGISTRY.pop("from-a-package")
    with pytest.raises(RetrieverError, match="unknown retriever 'nothing-here'"):
        build("nothing-here", {}, None)


def test_a_target_that_does_not_import_is_one_line(tmp_path):
    """``retriever._target_=nosuch_pkg.Foo``: one ``error:`` line, exit 2; no Hydra ``[ERROR]`` block
    (hydra.utils.get_object logs one) and no message over several lines."""
    done = _train(
        tmp_path, "+experiment=retrieve", "retriever._target_=nosuch_pkg.Foo", f"hydra.run.dir={tmp_path / 'r'}"
    )
    assert done.returncode == 2, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "[ERROR]" not in out and "Traceback" not in out
    assert out.strip().splitlines() == [  # no "Seed set to 42" before it either
        "error: retriever._target_=nosuch_pkg.Foo: cannot import it (ModuleNotFoundError: no module named "
        "'nosuch_pkg'; is the package that holds it installed here?)"
    ]


@pytest.mark.parametrize(
    "target, says",
    [
        (
            "gsr_train.retrievers.NoSuchRetriever",
            "AttributeError: gsr_train.retrievers has no attribute 'NoSuchRetriever'",
        ),
        ("gsr_train.no_such_module.Foo", "AttributeError: gsr_train has no attribute 'no_such_module'"),
        ("not a path", "ImportError: 'not a path' is not a dotted import path"),
    ],
)
def test_a_wrong_import_path_names_what_is_missing(target, says):
    from gsr_train.plugins import import_target

    with pytest.raises(RetrieverError) as err:
        import_target(target, RetrieverError, "retriever._target_")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_an_import_path_reaches_nested_attributes():
    from gsr_train.plugins import locate
    from gsr_train.retrievers.cosine import cosine_scores

    assert locate("gsr_train.retrievers.cosine.cosine_scores") is cosine_scores
    assert locate("os.path.join") is os.path.join
