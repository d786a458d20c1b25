"""SIGTERM while an open-ended run is judging with a model served from the run itself (issue 49,
probe 5): the server's threads were torn down by the interpreter in the middle of native code, and
the process aborted ("terminate called without an active exception", exit status 134). Now the run
is marked interrupted and the process leaves with 128 + SIGTERM, the status a scheduler reads."""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .test_reader_helpers import tiny_llama_folder
from .test_readme_commands import _checkout, _env
from .virtuoso import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _answered(cache: Path, since: float) -> int:
    """Answers the run's LLM client has committed to the response cache since ``since`` (each is
    committed as it arrives, `gsr_train.response_cache`): the judge is being asked."""
    path = cache / "llm" / "responses.sqlite"
    if not path.is_file():
        return 0
    with contextlib.closing(sqlite3.connect(path, timeout=5)) as db:
        try:
            return int(db.execute("SELECT COUNT(*) FROM responses WHERE created >= ?", (since,)).fetchone()[0])
        except sqlite3.OperationalError:  # the table is not made yet
            return 0


def test_sigterm_while_judging_leaves_with_143_and_an_interrupted_run(tmp_path, user_cache, shared_data):
    cwd, run = _checkout(tmp_path / "checkout"), tmp_path / "run"
    model = tiny_llama_folder(tmp_path / "tiny", context=4096)  # the judges' prompts are long
    argv = [
        sys.executable,
        "train.py",
        "+experiment=okgqa_open_ended",
        f"llm.autostart={model}",
        "llm.model=tiny_llama",
        f"llm.base_url=http://127.0.0.1:{free_port()}/v1",
        "open_ended.max_questions=40",
        f"hydra.run.dir={run}",
    ]
    since = time.time()
    proc = subprocess.Popen(argv, cwd=cwd, env=_env(user_cache), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 600
        while _answered(user_cache, since) < 20 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)  # the judge is being asked: the server's threads are busy
        assert proc.poll() is None, "the run ended before it was stopped"
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=300)[0].decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "terminate called" not in out and "SIGTERM: okgqa_open_ended stopped" in out, out[-3000:]
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
