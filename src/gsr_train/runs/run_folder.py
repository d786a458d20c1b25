"""Run folders are never shared and a finished run is never overwritten.

``hydra.run.dir`` defaults to a folder claimed atomically (:func:`gsr_train.config.claim_run_dir`).
Every run that ends writes ``run.json`` (status, experiment, command, time) into its folder;
:class:`RunFolderGuard` (a Hydra callback, before Hydra writes anything into the folder) stops
a new run pointed at a finished run's folder, unless it resumes that run (``resume=...``).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from gsr_train.io import write_json

MARKER = "run.json"

try:
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:  # pragma: no cover - hydra is a dependency
    _HydraCallback = object


def finished_run(folder: str | Path) -> dict | None:
    """The ``run.json`` of a finished run in ``folder``, or None."""
    try:
        state = json.loads((Path(folder) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and state.get("status") == "finished" else None


def mark_finished(folder: str | Path, experiment: Any) -> None:
    write_json(Path(folder) / MARKER, {"status": "finished", "experiment": experiment,
                                       "command": " ".join(sys.argv),
                                       "finished_at": time.strftime("%Y-%m-%d %H:%M:%S")})


class RunFolderGuard(_HydraCallback):
    """Hydra callback: refuse to start a run in the folder of a finished run (one clear message)."""

    def on_run_start(self, config, **kwargs: Any) -> None:
        folder = Path(str(config.hydra.run.dir))
        done = finished_run(folder)
        if done is None or config.get("resume"):
            return
        print(f"error: {folder} holds a finished run ({done.get('experiment')}, {done.get('finished_at')}); "
              "a new run would overwrite it. Leave hydra.run.dir unset for a new folder, pick another one, "
              "or continue that run with resume=auto.", file=sys.stderr)
        raise SystemExit(2)
