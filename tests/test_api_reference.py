"""The API reference (issue 49, item 5): every public module of ``gsr_train`` has one mkdocstrings
block (``::: gsr_train.x.y``) in the pages tools/write_api_reference.py writes under
docs/reference/api/, and those pages, the entry page's list and mkdocs.yml's nav are current."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
TOOL = REPO / "tools" / "write_api_reference.py"
BLOCK = re.compile(r"^::: ([\w.]+)\s*$", re.M)


def _public_modules() -> set[str]:
    """Every module of src/gsr_train (packages included) with no part of its name starting with ``_``."""
    found = set()
    for path in (SRC / "gsr_train").rglob("*.py"):
        folders = path.relative_to(SRC).parent.parts
        if not all((SRC / Path(*folders[: i + 1]) / "__init__.py").is_file() for i in range(len(folders))):
            continue
        parts = path.relative_to(SRC).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if not any(p.startswith("_") for p in parts):
            found.add(".".join(parts))
    return found


def test_the_api_reference_is_current():
    done = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{done.stderr}run python tools/write_api_reference.py"


def test_every_public_module_has_exactly_one_block():
    blocks = Counter(
        name for page in (REPO / "docs" / "reference" / "api").glob("*.md") for name in BLOCK.findall(page.read_text())
    )
    modules = _public_modules()
    assert len(modules) > 200 and "gsr_train.kg.store" in modules and "gsr_train.runs.pipeline" in modules
    missing = sorted(modules - set(blocks))
    twice = sorted(name for name, n in blocks.items() if n > 1)
    assert not missing, f"modules without a block: {missing}"
    assert not twice, f"modules with more than one block: {twice}"
    assert set(blocks) <= modules, f"blocks that are not public modules: {sorted(set(blocks) - modules)}"


def test_every_api_page_is_in_the_nav():
    nav = (REPO / "mkdocs.yml").read_text()
    pages = sorted(p.name for p in (REPO / "docs" / "reference" / "api").glob("*.md"))
    assert pages and not [p for p in pages if f"reference/api/{p}" not in nav]
