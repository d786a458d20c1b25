"""``runner: NAME`` finds ``gsr_train.runs.NAME.run`` without an entry in the runners table: a new
built-in experiment kind is its runner module, its options and its experiment file."""

from __future__ import annotations

import sys
import types

import pytest
from omegaconf import OmegaConf

from gsr_train.options import runners  # the lookup (runs/runners.py holds the table)
from gsr_train.runs.runners import RUNNERS, UnknownRunner, runner_of


def test_a_runner_module_is_found_by_its_name(monkeypatch):
    module = types.ModuleType("gsr_train.runs.toy_kind")

    def run(cfg):
        return "ran " + cfg.runner

    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gsr_train.runs.toy_kind", module)
    assert "toy_kind" not in RUNNERS
    found = runner_of(OmegaConf.create({"runner": "toy_kind"}))
    assert found is run and found(OmegaConf.create({"runner": "toy_kind"})) == "ran toy_kind"


def test_table_names_and_old_dotted_paths_still_resolve():
    assert runner_of(OmegaConf.create({"runner": "gsr"})) is RUNNERS["gsr"]
    assert runner_of(OmegaConf.create({"runner": "gsr_train.runs.subgraphrag.run"})) is RUNNERS["subgraphrag"]


@pytest.mark.parametrize("name", ["nosuch", "run_data", "summary"])
def test_a_name_without_a_runner_is_one_line(name):
    with pytest.raises(UnknownRunner) as e:
        runner_of(OmegaConf.create({"runner": name}))
    assert str(e.value).startswith(f"runner={name}: not a runner; built in: ") and "\n" not in str(e.value)


def test_a_broken_runner_module_raises_its_own_error(monkeypatch):
    def broken(name, *a, **k):
        if name == "gsr_train.runs.broken_kind":
            raise ModuleNotFoundError("No module named 'missing_dep'", name="missing_dep")
        return real(name, *a, **k)

    real = runners.importlib.import_module
    monkeypatch.setattr(runners.importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError, match="missing_dep"):
        runner_of(OmegaConf.create({"runner": "broken_kind"}))
