"""The one table style of every command and run: Markdown (readable in a terminal and a log file,
pasted as is into a README, an issue or a paper's notes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def markdown_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None, left: int = 1
) -> str:
    """``### title``, then ``| header |`` lines; the first ``left`` columns left-aligned, the rest right."""
    lines = [f"### {title}", ""] if title else []
    lines.append("| " + " | ".join(str(h) for h in headers) + " |")
    lines.append("|" + "|".join("---" if i < left else "---:" for i in range(len(headers))) + "|")
    lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
