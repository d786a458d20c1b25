"""A Virtuoso Open Source database for the tests: its own folder, ini and free ports (made by
:mod:`gsr_train.kg.virtuoso`, as ``gsr-train serve-kg`` makes one), run as a child process, bulk-loaded
from N-Triples files with ``ld_dir`` / ``rdf_loader_run``, SPARQL over HTTP. Debian's
``virtuoso-opensource`` package provides ``virtuoso-t`` and ``isql-vt``; where they are missing the tests
that need one skip with one line (``.ci/run`` installs the package)."""

from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from gsr_train.kg.virtuoso import Database, VirtuosoError, binaries, start


def need_virtuoso() -> None:
    try:
        binaries()
    except VirtuosoError:
        pytest.skip("virtuoso-t not installed (apt-get install virtuoso-opensource; .ci/run installs it)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Virtuoso:
    db: Database
    process: subprocess.Popen

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.db.http_port}/sparql"

    @property
    def sql_port(self) -> int:
        return self.db.sql_port

    def load(self, folder: Path, graph: str) -> None:
        """Bulk-load every ``*.nt`` file of ``folder`` into the named graph ``graph``."""
        self.db.bulk_load(f"ld_dir('{folder}', '*.nt', '{graph}');")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_virtuoso(folder: Path, allowed: Path) -> Virtuoso:
    """A fresh database in ``folder`` that may bulk-load from ``allowed``, answering SPARQL on a free port."""
    need_virtuoso()
    db = Database(folder.resolve() / "db", free_port(), free_port(), [str(allowed.resolve())])
    process = start(db, foreground=True)
    assert process is not None
    return Virtuoso(db, process)
