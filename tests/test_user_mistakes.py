"""A user's mistake is one line and exit status 2 from ``python train.py``, as typed, with no
traceback: a hub model or encoder this machine cannot get (the mission's own
``python train.py +experiment=gsr_base`` offline), synthetic-data options that make no world."""

from __future__ import annotations

import pytest

from .conftest import offline_env, run_train

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def empty_hf_home(tmp_path_factory) -> str:
    """One empty Hugging Face home for the three (offline, nothing lands in it): one environment, so
    their commands fork from one warm server, not three (``tests/warm_python.py``: one per environment)."""
    return str(tmp_path_factory.mktemp("hf"))


@pytest.mark.parametrize(
    "args,says",
    [
        (["+experiment=gsr_base"], "error: model 'google-t5/t5-base' is not in the local Hugging Face cache"),
        (
            ["+experiment=subgraphrag_webqsp", "data=webqsp_mini"],
            "encoder 'Alibaba-NLP/gte-large-en-v1.5' is not in the local Hugging Face cache",
        ),
        (
            ["+experiment=cosine_baseline", "+data.synthetic.num_people=40"],
            "error: synthetic benchmark: only 1 distinct two-topic questions fit this world",
        ),
    ],
    ids=["hub model", "hub encoder", "synthetic options"],
)
def test_mistake_is_one_line_and_exit_2(tmp_path, args, says, empty_hf_home):
    done = run_train(args, tmp_path, offline_env(tmp_path / "cache", HF_HOME=empty_hf_home))
    assert done.returncode == 2, done.stderr[-3000:]
    assert says in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1
