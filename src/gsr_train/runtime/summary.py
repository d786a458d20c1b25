"""The one screen every run ends with: what ran, how long, where its files are, and its table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gsr_train.config import run_state
from gsr_train.eval.tail import METRICS_FILE, MetricsFileError, cell_text, flat_rows, read_metrics, table_columns

MAX_TABLE_LINES = 24


def _table(folder: Path) -> str | None:
    """The run's main table: the one its runner printed (SubgraphRAG's comparison, the readers' and
    the robustness study's tables), else the rows of its ``metrics.json`` (`gsr_train.eval.tail`)."""
    try:
        doc = read_metrics(folder / METRICS_FILE) if (folder / METRICS_FILE).is_file() else None
    except MetricsFileError:
        doc = None
    table = ((doc or {}).get("tables") or {}).get("overall")
    if table:
        return table
    for name in ("qa_table.txt", "robustness.md"):
        if (folder / name).is_file():
            return (folder / name).read_text()
    if not doc or not doc["rows"]:
        return None
    rows = flat_rows(doc)
    cols = table_columns(c for c in dict.fromkeys(k for r in rows for k in r) if c not in ("data", "split"))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell_text(r, c) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def run_summary(folder: str | Path, experiment: Any, seconds: float | None) -> str:
    """``seconds`` None: a run that finished earlier (its finishing time from ``run.json``)."""
    folder = Path(folder)
    files = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir() if not p.name.startswith("."))
    if seconds is None:
        when = f"at {(run_state(folder) or {}).get('finished_at', '?')}"
    else:
        minutes, secs = divmod(int(seconds), 60)
        when = f"in {minutes}:{secs:02d}"
    lines = [f"== {experiment} finished {when} -> {folder}", "files: " + ", ".join(files)]
    table = _table(folder)
    if table:
        body = table.strip().splitlines()
        lines += body[:MAX_TABLE_LINES] + (
            [f"... ({len(body) - MAX_TABLE_LINES} more lines in the files above)"]
            if len(body) > MAX_TABLE_LINES
            else []
        )
    return "\n".join(lines)
