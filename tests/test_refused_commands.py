"""A refused command leaves no folder: the fifteen mistakes of ``tests/refused_commands.py`` (bad
options, missing files, no or an unknown experiment, eval.py mistakes) each exit 2 with one
message, and none leaves a run folder (it is claimed only when the run's work starts, and a run
refused after that takes it back). Each is refused before torch, Lightning, PyG or transformers is
imported: a missing data folder or checkpoint is found from the composed config alone."""

from __future__ import annotations

import pytest

from .conftest import REPO
from .refused_commands import COMMANDS, folders, run_refused

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_fifteen_refused_commands_leave_no_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    report = []
    for script, args in COMMANDS:
        code, message, left, heavy = run_refused(REPO, script, args, tmp_path)
        assert code == 2, (script, args, message)
        assert message.strip(), (script, args)
        assert heavy == [], (script, args, heavy)  # refused before torch or Lightning loads: well under a second
        report += [f"{script} {' '.join(args)}: {left}"] if left else []
    assert len(COMMANDS) == 15
    assert report == [] and folders(tmp_path) == []
