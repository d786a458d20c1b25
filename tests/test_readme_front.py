"""The README's first two commands stay what they were: setup + the quickstart, setup + the tests.

The second is what CI runs (``.ci/run`` ends with it, word for word); the first is setup.sh and the
quickstart run that docs/getting-started.md shows and tests/test_getting_started.py runs as written.
"""

from __future__ import annotations

from .doc_blocks import REPO, blocks, commands

QUICKSTART = "bash setup.sh && .venv/bin/python train.py +experiment=subgraphrag_quickstart"
TESTS = "bash setup.sh && .venv/bin/python -m pytest -n 2"


def test_the_first_commands_are_the_quickstart_and_ci():
    text = REPO.joinpath("README.md").read_text()
    first = blocks("README.md")[0]
    assert text.index(first) < text.index("\n## ")  # the first thing the README shows
    assert commands(first) == [QUICKSTART, TESTS]
    ci = REPO.joinpath(".ci", "run").read_text().splitlines()
    assert ci[-1] == TESTS
    tutorial = [line for body in blocks("docs/getting-started.md") for line in commands(body)]
    quickstart = QUICKSTART.split(" && .venv/bin/")[1]
    assert tutorial[:3] == ["bash setup.sh", "source .venv/bin/activate", quickstart]
