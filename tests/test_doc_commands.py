"""Commands of the docs that no other test runs.

The cheap ones run as written (``test_option_commands_as_written``). The rest need a GPU, the Hub, an
LLM endpoint, a trained run or an hour of CPU, so ``test_train_lines_compose`` composes every
``python train.py`` line of the blocks marked ``<!-- composed by: tests/test_doc_commands.py::... -->``
exactly as written (placeholders such as ``<run>`` filled with a path, a sweep's ``a,b`` composed once
per value) and checks it as run_experiment does before any work, without running it; a ``python
eval.py`` line there is parsed by Hydra's override parser (composing it needs the trained run).

Pages read here: docs/explanations/baselines.md, docs/explanations/subgraphrag.md,
docs/explanations/gsr.md, docs/explanations/gsr-learning-curve.md, docs/explanations/readers.md,
docs/explanations/robustness.md, docs/explanations/reproduction.md, docs/how-to/slurm.md,
docs/how-to/add-a-retriever.md, docs/reference/configuration.md.
"""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess

import pytest

from .conftest import compose_config
from .doc_blocks import FENCE, commands, page_text
from .test_readme_commands import _argv, _checkout, _env

COMPOSED_PAGES = (
    "docs/explanations/baselines.md",
    "docs/explanations/subgraphrag.md",
    "docs/explanations/gsr.md",
    "docs/explanations/gnn-rag.md",
    "docs/explanations/gsr-learning-curve.md",
    "docs/explanations/readers.md",
    "docs/explanations/robustness.md",
    "docs/explanations/reproduction.md",
    "docs/how-to/slurm.md",
    "docs/how-to/add-a-retriever.md",
)
OPTIONS_PAGE = "docs/reference/configuration.md"
PLACEHOLDER = re.compile(r"<[^<>]+>")


def marked_blocks(page: str, test: str) -> list[str]:
    """The ```bash blocks of ``page`` whose marker names ``test`` of this module."""
    text = page_text(page)
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if match.group(1) == "bash" and before.endswith(f"tests/test_doc_commands.py::{test} -->"):
            found.append(match.group(2))
    return found


def _expand(args: list[str]) -> list[list[str]]:
    """A sweep's overrides (``key=a,b`` outside brackets and quotes) as one override list per point."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(args)
    choices = []
    for override in parsed:
        if override.is_sweep_override():
            key = override.get_key_element()
            choices.append([f"{key}={v}" for v in override.sweep_string_iterator()])
        else:
            choices.append([override.input_line])
    return [list(point) for point in itertools.product(*choices)]


@pytest.mark.parametrize("page", COMPOSED_PAGES)
def test_train_lines_compose(page, tmp_path):
    from gsr_train.options.check import check_recipe

    found = marked_blocks(page, "test_train_lines_compose")
    assert found, f"{page}: no block marked for this test"
    composed = 0
    for body in found:
        for line in commands(body):
            words = shlex.split(PLACEHOLDER.sub("outputs/run", line))
            words = [w for w in words if w != "..."]
            if words[:2] == ["python", "eval.py"]:
                from hydra.core.override_parser.overrides_parser import OverridesParser

                OverridesParser.create().parse_overrides(words[2:])
                continue
            if words[:2] != ["python", "train.py"]:
                continue  # another command of the block (gsr-train ...): not composed here
            args = [w for w in words[2:] if w != "-m"]
            hydra = any(a.startswith(("hydra/", "hydra.")) for a in args)
            for point in _expand(args):
                extra = [f"hydra.sweep.dir={tmp_path}"] if hydra else []
                cfg = compose_config(point + extra, return_hydra_config=hydra)
                check_recipe(cfg)
                composed += 1
    assert composed, f"{page}: no python train.py line in the marked blocks"


def test_option_commands_as_written(tmp_path):
    """The options block of the configuration page, as written: each prints options, exit 0."""
    (body,) = marked_blocks(OPTIONS_PAGE, "test_option_commands_as_written")
    lines = commands(body)
    assert len(lines) == 4
    cwd = _checkout(tmp_path / "checkout")
    outputs = []
    for line in lines:
        done = subprocess.run(_argv(line, cwd), cwd=cwd, env=_env(tmp_path / "cache"), capture_output=True, text=True)
        assert done.returncode == 0, (line, done.stderr[-3000:])
        outputs.append(done.stdout)
    assert not (cwd / "outputs").exists()  # printing options makes no run folder
    quickstart, gsr, helped, experiments = outputs
    assert "model.hidden" in quickstart and "top_k" in quickstart
    assert "gsr_minilm" in gsr or "minilm" in gsr
    assert "model.hidden" in helped
    assert "subgraphrag_quickstart" in experiments and "gsr_quickstart" in experiments
