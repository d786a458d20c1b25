"""The commands the README and the docs show, read out of the pages, so that tests run them as written.

``blocks("docs/how-to/sweep.md")`` is every ```bash block of that page; ``heading=`` narrows it to one
section (the heading's text, up to the next heading of the same or a higher level). ``commands(block)``
is a block's command lines: continuation lines joined, comment lines and trailing comments dropped.
Every ```bash block of README.md and docs/ names the test that runs it (tests/test_doc_markers.py).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def page_text(page: str) -> str:
    return (REPO / page).read_text()


def section(page: str, heading: str | None = None) -> str:
    """The page, or the part of it under ``heading`` (``## Title`` or ``Title``)."""
    text = page_text(page)
    if heading is None:
        return text
    title = heading.lstrip("#").strip()
    found = re.search(rf"^(#+) {re.escape(title)}\s*$", text, re.M)
    assert found, f"{page}: no heading {title!r}"
    level = len(found.group(1))
    rest = text[found.end() :]
    stop = re.search(rf"^#{{1,{level}}} \S", _outside_fences(rest), re.M)
    return rest[: stop.start()] if stop else rest


def _outside_fences(text: str) -> str:
    """``text`` with the inside of code blocks blanked (same length), so a ``#`` comment is no heading."""
    return FENCE.sub(lambda m: " " * len(m.group(0)), text)


def blocks(page: str, heading: str | None = None, lang: str = "bash") -> list[str]:
    return [body for kind, body in FENCE.findall(section(page, heading)) if kind == lang]


def block(page: str, marker: str, heading: str | None = None) -> str:
    """The one ```bash block of ``page`` that contains ``marker``."""
    found = [b for b in blocks(page, heading) if marker in b]
    assert len(found) == 1, f"one block with {marker!r} in {page}, found {len(found)}"
    return found[0]


def commands(body: str) -> list[str]:
    """A block's command lines: continuations joined, comment lines and trailing ``  # ...`` dropped."""
    lines = [line.strip() for line in body.replace("\\\n", " ").splitlines()]
    return [re.sub(r"\s+#\s.*$", "", line) for line in lines if line and not line.startswith("#")]
