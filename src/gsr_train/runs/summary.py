"""The one screen every run ends with: what ran, how long, where its files are, and its table."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_TABLE_LINES = 24


def _table(folder: Path) -> str | None:
    """The run's main table, from whichever figures file its runner wrote."""
    results = folder / "results.json"
    if results.is_file():
        try:
            figures = json.loads(results.read_text())
        except ValueError:
            figures = {}
        table = (figures.get("tables") or {}).get("overall")
        if table:
            return table
    for name in ("qa_table.txt", "robustness.md"):
        if (folder / name).is_file():
            return (folder / name).read_text()
    if (folder / "metrics.json").is_file():  # GSR: chain match per decoding mode
        try:
            figures = json.loads((folder / "metrics.json").read_text())
        except ValueError:
            return None
        modes = [m for m in ("unconstrained", "constrained") if isinstance(figures.get(m), dict)]
        if modes:
            keys = list((figures[modes[0]].get("chain_match") or {}))
            lines = ["| decoding | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
            for m in modes:
                match = figures[m].get("chain_match") or {}
                lines.append(f"| {m} | " + " | ".join(f"{match.get(k, float('nan')):.4f}" for k in keys) + " |")
            return "\n".join(lines)
    return None


def run_summary(folder: str | Path, experiment: Any, seconds: float) -> str:
    folder = Path(folder)
    files = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir() if not p.name.startswith("."))
    minutes, secs = divmod(int(seconds), 60)
    lines = [f"== {experiment} finished in {minutes}:{secs:02d} -> {folder}", "files: " + ", ".join(files)]
    table = _table(folder)
    if table:
        body = table.strip().splitlines()
        lines += body[:MAX_TABLE_LINES] + ([f"... ({len(body) - MAX_TABLE_LINES} more lines in the files above)"]
                                           if len(body) > MAX_TABLE_LINES else [])
    return "\n".join(lines)
