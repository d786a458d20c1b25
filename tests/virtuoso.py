"""A Virtuoso Open Source database for the tests: its own folder, ini and free ports, bulk-loaded from
N-Triples files with ``ld_dir`` / ``rdf_loader_run``, SPARQL over HTTP. Debian's ``virtuoso-opensource``
package provides ``virtuoso-t`` and ``isql-vt``; where they are missing the tests that need one skip with
one line (``.ci/run`` installs the package)."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

SERVER = shutil.which("virtuoso-t")
ISQL = shutil.which("isql-vt")
BASE_INI = Path("/etc/virtuoso-opensource-7/virtuoso.ini")


def need_virtuoso() -> None:
    if not (SERVER and ISQL and BASE_INI.is_file()):
        pytest.skip("virtuoso-t not installed (apt-get install virtuoso-opensource; .ci/run installs it)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Virtuoso:
    folder: Path
    sql_port: int
    http_port: int
    process: subprocess.Popen

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/sparql"

    def isql(self, statements: str) -> str:
        done = subprocess.run(
            [ISQL, str(self.sql_port), "dba", "dba", f"exec={statements}"], capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0 and "Error" not in done.stdout, done.stdout + done.stderr
        return done.stdout

    def load(self, folder: Path, graph: str) -> None:
        """Bulk-load every ``*.nt`` file of ``folder`` into the named graph ``graph``."""
        self.isql(f"ld_dir('{folder}', '*.nt', '{graph}'); rdf_loader_run(); checkpoint;")

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
    db = folder / "db"
    db.mkdir(parents=True, exist_ok=True)
    sql_port, http_port = free_port(), free_port()
    ini = BASE_INI.read_text().replace("/var/lib/virtuoso-opensource-7/db/", f"{db}/")
    ini = re.sub(r"(\[Parameters\][^\[]*?ServerPort\s*=\s*)\d+", rf"\g<1>{sql_port}", ini, flags=re.S)
    ini = re.sub(r"(\[HTTPServer\][^\[]*?ServerPort\s*=\s*)\d+", rf"\g<1>{http_port}", ini, flags=re.S)
    ini = re.sub(r"^(DirsAllowed\s*=.*)$", rf"\g<1>, {allowed}", ini, flags=re.M)
    (folder / "virtuoso.ini").write_text(ini)
    log = open(folder / "server.log", "w")
    process = subprocess.Popen(
        [SERVER, "+configfile", str(folder / "virtuoso.ini"), "+foreground"], cwd=folder, stdout=log, stderr=log
    )
    server = Virtuoso(folder, sql_port, http_port, process)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"virtuoso-t exited: {(folder / 'server.log').read_text()[-2000:]}")
        try:
            if httpx.get(server.endpoint, params={"query": "ASK {}"}, timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    server.stop()
    raise RuntimeError("virtuoso-t did not answer SPARQL within 120 s")
