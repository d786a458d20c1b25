"""One-way layers (the import-linter contract in pyproject.toml) and no import cycles between modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_layers_contract_is_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "1 kept, 0 broken" in done.stdout


def test_every_subpackage_is_in_a_layer():
    import tomllib

    layers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]["layers"]
    named = {part.strip().split(".", 1)[1] for layer in layers for part in layer.split("|")}
    src = ROOT / "src" / "gsr_train"
    present = {p.name for p in src.iterdir() if (p / "__init__.py").exists()}
    present |= {p.stem for p in src.glob("*.py") if p.stem != "__init__"}
    assert present == named, f"not in a layer: {sorted(present - named)}; gone: {sorted(named - present)}"


def test_no_import_cycles_between_modules():
    import grimp
    import networkx as nx

    graph = grimp.build_graph("gsr_train", include_external_packages=False)
    g = nx.DiGraph()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if not module.startswith(imported + ".") and not imported.startswith(module + "."):
                g.add_edge(module, imported)  # a package's __init__ and its own modules are not a cycle
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert cycles == [], cycles


# the floors below the runners that read typed options (recipe dataclasses, RunPlace), never the Hydra config
CONFIG_FREE = (
    "readers",
    "retrievers",
    "openended",
    "robustness",
    "patterns",
    "datamodules",
    "models",
    "features",
    "text",
    "kg",
    "data",
)


def test_the_floors_below_the_runners_never_see_the_hydra_config():
    """Issue 49: a runner builds its typed recipe from the checked config and hands that (or what it
    builds from it) down; these packages do not import omegaconf, so a DictConfig cannot reach them."""
    import grimp

    graph = grimp.build_graph("gsr_train", include_external_packages=True, cache_dir=None)  # a cache can be stale
    readers = sorted(
        module
        for module in graph.find_modules_that_directly_import("omegaconf")
        if any(module == f"gsr_train.{p}" or module.startswith(f"gsr_train.{p}.") for p in CONFIG_FREE)
    )
    assert readers == [], f"modules reading the Hydra config below the runners: {readers}"
