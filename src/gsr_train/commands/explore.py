"""``gsr-train explore RUN [RUN_B ...]``: a run's questions one by one in the browser.

Writes one self-contained HTML page (``--out``, default ``RUN/explore_<split>.html``): the run's figures
with their intervals, every question of the split in a table that sorts and filters (failed only, by
hops, by a relation of the gold chain, by text), and each question's graph drawn with its retrieved
triples, shortest paths, GSR's chains and a reader's answer. Two or more runs: the questions one gets
right and the other misses, rank differences and both retrievals in one drawing. ``--serve`` serves the
page on localhost (for a large run, or a browser that will not open local files).
"""

from __future__ import annotations

import functools
import http.server
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from gsr_train.commands import run, run_folders
from gsr_train.data.errors import UserError

TOP = 50


def bind(port: int) -> http.server.ThreadingHTTPServer:
    """The server of ``--serve``, bound before the page is written: a taken port is one line up front."""
    try:
        return http.server.ThreadingHTTPServer(("127.0.0.1", port), _QuietHandler)
    except OSError as e:
        raise UserError(
            f"--port {port}: cannot serve there ({e.strerror}); pass another --port, or 0 for any free one"
        ) from None


def serve(server: http.server.ThreadingHTTPServer, page: Path) -> None:
    """Serve ``page``'s folder until Ctrl-C (the page's address printed first)."""
    server.RequestHandlerClass = functools.partial(_QuietHandler, directory=str(page.parent))  # type: ignore[assignment]
    with server:
        print(f"serving http://127.0.0.1:{server.server_address[1]}/{page.name} (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass


def command(
    runs: Annotated[
        list[str],
        typer.Argument(metavar="RUN [RUN_B ...]", help="run folders (the first one's data)", callback=run_folders),
    ],
    split: Annotated[str, typer.Option("--split", help="the split whose questions the page shows")] = "test",
    out: Annotated[
        str | None,
        typer.Option("--out", help="the HTML file (default RUN/explore_<split>.html, or _vs_... for more runs)"),
    ] = None,
    top: Annotated[int, typer.Option("--top", min=1, max=1000, help="triples kept per question and run")] = TOP,
    serve_page: Annotated[bool, typer.Option("--serve", help="then serve the page on localhost until Ctrl-C")] = False,
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="the port of --serve (0: any free one)")] = 8765,
) -> int:
    """Write a run's explorer page: figures, every question in a table that sorts and filters, and each
    question's graph with its retrieved triples (two or more runs: side by side)."""
    from gsr_train.explore.page import default_out, render, write_page

    server = bind(port) if serve_page else None
    page = render(runs, split, top)
    written = write_page(page, out or default_out(runs, split))
    print(f"wrote {written} ({page.questions} questions, {page.views} views, {written.stat().st_size / 1e6:.1f} MB)")
    if server is not None:
        serve(server, written)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(command, argv, "gsr-train explore")


if __name__ == "__main__":
    raise SystemExit(main())
