"""The explorer page: one self-contained HTML file (styles, script and data inlined; nothing fetched
when it is viewed, so it can be copied home from a cluster and opened offline)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from gsr_train.explore.sources import open_runs
from gsr_train.io import atomic_write

TOP = 50  # triples kept per question and view


@dataclass
class Page:
    html: str
    questions: int
    views: int
    chunks: int


def _asset(name: str) -> str:
    return resources.files("gsr_train.explore").joinpath("assets", name).read_text(encoding="utf-8")


def render(paths: Sequence[str | Path], split: str = "test", top: int = TOP) -> Page:
    """The page of the runs at ``paths`` on ``split``. Every run folder is checked first
    (`open_runs`), and the page's data code (torch, Lightning, the KG index) is imported only then: a
    mistake in a folder (a split it lacks, runs of other data) is one line in well under a second."""
    runs = open_runs(paths, split)
    from gsr_train.explore.page_data import CHUNK, detail_chunks, encode_chunk, page_inputs, read_view, summary

    inputs = page_inputs(runs, split, top)
    views = [read_view(v, inputs) for run in runs for v in run.views]
    doc = summary(inputs, views)
    doc["chunk"] = CHUNK
    chunks = detail_chunks(inputs, views)
    title = "gsr-train explore: " + " vs ".join(f"{r.name} {r.folder.name}" for r in runs)
    page = (
        _asset("explore.html")
        .replace("__TITLE__", html.escape(title))
        .replace("__STYLE__", _asset("explore.css"))
        .replace("__SUMMARY__", encode_chunk(doc))
        .replace(
            "__CHUNKS__",
            "\n".join(f'<script type="text/plain" id="chunk-{i}">{c}</script>' for i, c in enumerate(chunks)),
        )
        .replace("__SCRIPT__", _asset("explore.js"))
    )
    return Page(page, len(doc["ids"]), len(views), len(chunks))


def default_out(paths: Sequence[str | Path], split: str) -> Path:
    """``RUN_A/explore_<split>.html``; beside other runs ``..._vs_<B's parent>_<B's folder>...``."""
    first = Path(paths[0])
    others = "".join(f"_vs_{Path(p).resolve().parent.name}_{Path(p).resolve().name}" for p in paths[1:])
    return first / f"explore_{split}{others}.html"


def write_page(page: Page, out: str | Path) -> Path:
    out = Path(out)
    with atomic_write(out, encoding="utf-8") as f:
        f.write(page.html)
    return out
