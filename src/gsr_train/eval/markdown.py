"""The one table style of every command and run: Markdown (readable in a terminal and a log file,
pasted as is into a README, an issue or a paper's notes)."""

from __future__ import annotations

import math
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


def format_estimate(
    value: float | None, low: float | None, high: float | None, digits: int = 3, scale: float = 1.0
) -> str:
    """``0.766 (0.72-0.81)`` (``-`` for no value; the value alone without bounds); bounds that can be
    negative are written ``(-0.05 to 0.02)``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    text = f"{scale * value:.{digits}f}"
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return text
    d = max(digits - 1, 0)
    sep = " to " if min(low, high) < 0 else "-"
    return f"{text} ({scale * low:.{d}f}{sep}{scale * high:.{d}f})"


def format_cell(value: Any, bounds: Sequence[float] | None = None, digits: int = 3, scale: float = 1.0) -> str:
    """A table cell: a figure with its interval ``bounds`` (``[low, high]`` as metrics.json keeps it, or
    None) as `format_estimate` writes it; an integer or a string as it is, ``-`` for none. Every
    table of figures writes its cells with it."""
    if value is None or isinstance(value, bool):
        return "-" if value is None else str(value)
    if isinstance(value, int) or not isinstance(value, float):
        return str(value)
    low, high = (float(bounds[0]), float(bounds[1])) if bounds is not None and len(bounds) == 2 else (None, None)
    return format_estimate(value, low, high, digits, scale)
