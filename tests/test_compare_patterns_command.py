"""The pattern comparison's command runs as the docs show it (docs/explanations/patterns.md).

The command is read from the page, so the test follows the text; ``GSR_RUN`` and ``SG_RUN`` are a GSR and
a SubgraphRAG run on webqsp_mini trained here first (one short epoch each, the cache shared with the
comparison), a ``*`` is expanded as the shell does, and ``../shared/data`` is the real fixtures beside
the checkout. Everything else on the line is the page's.
"""

from __future__ import annotations

import glob
import json
import shlex
import subprocess
from pathlib import Path

import pytest

from .conftest import SHARED_DATA, quiet
from .doc_blocks import blocks, commands
from .test_readme_commands import _argv, _checkout, _env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PAGE = "docs/explanations/patterns.md"
QUIET = quiet("csv")


def _command() -> str:
    found = [b for lang in ("bash", "console") for b in blocks(PAGE, lang=lang) if "gsr-train compare-patterns" in b]
    assert len(found) == 1, f"one block with gsr-train compare-patterns in {PAGE}, found {len(found)}"
    (line,) = commands(found[0])
    return line


def _shell(checkout: Path, cache: Path, words: list[str]) -> None:
    """``words`` run in the checkout as a user's shell runs the line; it must succeed (training and the comparison)."""
    done = subprocess.run(
        _argv(shlex.join(words), checkout), cwd=checkout, env=_env(cache), capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _train(checkout: Path, cache: Path, *args: str) -> None:
    _shell(checkout, cache, ["python", "train.py", *args, *QUIET])


# the page names SG_RUN/checkpoints/best.ckpt, a file no run writes (a run's best is best-XX.ckpt): the
# change is asked for in the docs notes; once the page names what a run writes this test runs as is
NAMES_NO_FILE = "SG_RUN/checkpoints/best.ckpt" in _command()


@pytest.mark.xfail(
    NAMES_NO_FILE, reason="the page names SG_RUN/checkpoints/best.ckpt", raises=AssertionError, strict=True
)
def test_compare_patterns_runs_as_the_page_shows(tmp_path, webqsp_mini, user_cache):
    checkout = _checkout(tmp_path / "work")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(SHARED_DATA)
    cache = user_cache
    sg, gsr = tmp_path / "sg_run", tmp_path / "gsr_run"
    _train(checkout, cache, "+experiment=subgraphrag_webqsp_mini", "model.train.epochs=1", f"hydra.run.dir={sg}")
    _train(
        checkout,
        cache,
        "+experiment=gsr_quickstart",
        "data=webqsp_mini",
        "model.epochs=1",
        f"hydra.run.dir={gsr}",
    )
    line = _command().replace("GSR_RUN", str(gsr)).replace("SG_RUN", str(sg))
    words = []
    for word in shlex.split(line):
        matches = sorted(glob.glob(word)) if "*" in word else [word]
        assert matches, f"{word}: no such file (the command of {PAGE})"
        assert not word.startswith((str(sg), str(gsr))) or Path(matches[0]).exists(), f"{word}: no such file"
        words += matches
    _shell(checkout, cache, words)
    out = checkout / "outputs" / "patterns_compare"
    table = (out / "comparison.md").read_text()
    for method in ("cosine", "SubgraphRAG", "GSR", "SimGRAG (GSR chains)", "SAFE (GSR chains)", "SAFE (gold chains)"):
        assert f"| {method} |" in table, table
    rows = {row["method"]: row for row in json.loads((out / "comparison.json").read_text())["rows"]}
    assert rows["GSR"].get("ms_per_question") is not None, rows["GSR"]  # its decoding time, from --gsr-metrics
    assert rows["SubgraphRAG"].get("ms_per_question") is not None, rows["SubgraphRAG"]  # re-scored from the ckpt
