"""The scoreboard command of docs/how-to/score.md runs as written: our reader's prediction file and
another system's (RoG's format) in a checkout, one row each, the figures in ./scoreboard.json."""

from __future__ import annotations

import json

from .doc_blocks import block, commands
from .test_readme_commands import _checkout, _env, _run

PAGE = "docs/how-to/score.md"


def test_the_scoreboard_command_as_written(tmp_path):
    (line,) = commands(block(PAGE, "predictions_finetuned_retrieved.jsonl"))
    cwd = _checkout(tmp_path / "checkout")
    run = cwd / "outputs" / "reader_webqsp_mini" / "2026-11-27_01-00-00"
    run.mkdir(parents=True)
    ours = [
        {"id": "q1", "prediction": ["Jamaican English"], "answers": ["Jamaican English"]},
        {"id": "q2", "prediction": ["Paris"], "answers": ["London"]},
    ]
    (run / "predictions_finetuned_retrieved.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ours))
    (cwd / "other").mkdir()
    rog = [{"id": "q1", "prediction": "Jamaican English language", "ground_truth": ["Jamaican English"]}]
    (cwd / "other" / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rog))
    done = _run(line, cwd, _env(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((cwd / "scoreboard.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert len(rows) == 2 and [r["scored"] for r in rows] == [2, 1]
    assert rows[0]["hit@1"] == 0.5 and rows[1]["hit"] == 1.0 and rows[1]["hit@1"] == 0.0
