"""A local Virtuoso Open Source database serving a KG over SPARQL (``gsr-train serve-kg``), and the tests'.

Debian's ``virtuoso-opensource`` package gives ``virtuoso-t`` (the server) and ``isql-vt`` (its SQL
client). A database here is a folder of its own: an ini derived from the package's (its files in the
folder, its ports, the folders it may bulk-load from), started in the background, RDF files bulk-loaded
with ``ld_add`` / ``rdf_loader_run`` into one named graph, each file once (the folder's
``serve-kg.json`` records what was loaded and the ports). SPARQL answers at
``http://localhost:<http_port>/sparql``, which is what ``data.kg=`` and ``gsr-train ask --kg`` take.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from gsr_train.data.errors import UserError
from gsr_train.io import write_json

BASE_INI = Path("/etc/virtuoso-opensource-7/virtuoso.ini")
PACKAGE_DB = "/var/lib/virtuoso-opensource-7/db/"
STATE = "serve-kg.json"
RDF_SUFFIXES = (".nt", ".nq", ".ttl", ".n3", ".nt.gz", ".nq.gz", ".ttl.gz")
INSTALL = "apt-get install virtuoso-opensource (Debian / Ubuntu)"


class VirtuosoError(UserError, RuntimeError):
    """Virtuoso missing, a port taken, a file it cannot load: one line."""


def binaries() -> tuple[str, str]:
    server, isql = shutil.which("virtuoso-t"), shutil.which("isql-vt")
    if not (server and isql and BASE_INI.is_file()):
        raise VirtuosoError(f"virtuoso-t, isql-vt or {BASE_INI} not found: {INSTALL}")
    return server, isql


def port_free(port: int) -> bool:
    """Nobody listens on ``port`` (connections closing there do not count: a server rebinds over them)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Database:
    """One database folder: its ports and what it holds (``serve-kg.json``)."""

    folder: Path
    sql_port: int
    http_port: int
    allowed: list[str] = field(default_factory=list)
    loaded: dict[str, dict] = field(default_factory=dict)  # file -> {size, mtime, graph}

    @property
    def endpoint(self) -> str:
        return f"http://localhost:{self.http_port}/sparql"

    @classmethod
    def open(cls, folder: str | Path, sql_port: int = 1111, http_port: int = 8890) -> Database:
        folder = Path(folder).resolve()
        state = folder / STATE
        if state.is_file():
            doc = json.loads(state.read_text())
            return cls(folder, int(doc["sql_port"]), int(doc["http_port"]), list(doc["allowed"]), dict(doc["loaded"]))
        return cls(folder, sql_port, http_port)

    def save(self) -> None:
        doc = asdict(self)
        doc["folder"] = str(self.folder)
        write_json(self.folder / STATE, doc)

    def write_ini(self) -> Path:
        """The package's ini with this folder's files, ports and load folders."""
        self.folder.mkdir(parents=True, exist_ok=True)
        ini = BASE_INI.read_text().replace(PACKAGE_DB, f"{self.folder}/")
        ini = re.sub(r"(\[Parameters\][^\[]*?ServerPort\s*=\s*)\d+", rf"\g<1>{self.sql_port}", ini, flags=re.S)
        ini = re.sub(r"(\[HTTPServer\][^\[]*?ServerPort\s*=\s*)\d+", rf"\g<1>{self.http_port}", ini, flags=re.S)
        if self.allowed:
            ini = re.sub(r"^(DirsAllowed\s*=.*)$", rf"\g<1>, {', '.join(self.allowed)}", ini, flags=re.M)
        path = self.folder / "virtuoso.ini"
        path.write_text(ini)
        return path

    def answers(self, timeout: float = 2.0) -> bool:
        try:
            return httpx.get(self.endpoint, params={"query": "ASK {}"}, timeout=timeout).status_code == 200
        except httpx.TransportError:
            return False

    def isql(self, statements: str, timeout: float | None = 600) -> str:
        """``statements`` run by ``isql-vt``; its output. ``timeout=None`` waits as long as they take (a bulk
        load: 166 s for 20M triples on 2 cores, more than 10 minutes for 100M); a statement that outlives its
        limit is one line naming the database and the statement."""
        _, isql = binaries()
        try:
            done = subprocess.run(
                [isql, str(self.sql_port), "dba", "dba", f"exec={statements}"],
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            said = " ".join(statements.split())[:120]
            raise VirtuosoError(
                f"Virtuoso in {self.folder} (SQL port {self.sql_port}) did not finish {said!r} within {timeout:g} s"
            ) from None
        if done.returncode != 0 or "*** Error" in done.stdout or "Error" in done.stderr:
            said = " ".join((done.stdout + done.stderr).split())[-400:]
            raise VirtuosoError(f"Virtuoso in {self.folder} (SQL port {self.sql_port}): {said}")
        return done.stdout

    def bulk_load(self, adds: str) -> None:
        """``adds`` (``ld_add`` / ``ld_dir`` calls) bulk-loaded and checkpointed, however long it takes: no time
        limit (a 100M-triple load outlived the tests' 600 s; serve-kg gave loads an hour)."""
        self.isql(f"{adds} rdf_loader_run(); checkpoint;", timeout=None)


def start(db: Database, foreground: bool = False, wait: float = 120.0) -> subprocess.Popen | None:
    """Start the database (in the background, or as a child process with ``foreground``) and wait until it
    answers SPARQL; a port another program holds is one line before anything starts."""
    server, _ = binaries()
    taken = [f"{name} {p}" for name, p in (("SQL port", db.sql_port), ("HTTP port", db.http_port)) if not port_free(p)]
    if taken:
        raise VirtuosoError(f"{' and '.join(taken)} in use (another database?): give --port / --sql_port")
    ini = db.write_ini()
    (db.folder / "virtuoso.lck").unlink(missing_ok=True)  # left by a killed server (its ports are free)
    log = db.folder / "server.out"
    args = [server, "+configfile", str(ini), "+foreground" if foreground else "+wait"]
    with open(log, "w") as out:
        child = subprocess.Popen(args, cwd=db.folder, stdout=out, stderr=out, start_new_session=not foreground)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if foreground and child.poll() is not None:
            raise VirtuosoError(f"virtuoso-t exited: {log.read_text()[-1000:]}")
        if db.answers():
            return child if foreground else None
        time.sleep(0.3)
    raise VirtuosoError(f"virtuoso-t in {db.folder} did not answer SPARQL within {wait:.0f} s (see {log})")


def stop(db: Database) -> None:
    """Shut the database down (a checkpoint first, so what was loaded stays)."""
    db.isql("checkpoint; shutdown;", timeout=120)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (port_free(db.sql_port) and port_free(db.http_port)):
        time.sleep(0.3)


def check_files(files: Sequence[str | Path]) -> list[Path]:
    """The RDF files, each existing and of a kind Virtuoso bulk-loads: one line naming the first that is not."""
    out = []
    for f in files:
        path = Path(f).resolve()
        if not path.is_file():
            raise VirtuosoError(f"{f}: no such file")
        if not path.name.lower().endswith(RDF_SUFFIXES):
            raise VirtuosoError(f"{f}: not an RDF file Virtuoso loads ({', '.join(RDF_SUFFIXES)})")
        out.append(path)
    return out


def load(db: Database, files: Sequence[Path], graph: str) -> list[Path]:
    """Bulk-load each file not loaded yet (or changed since) into ``graph``; the files loaded now."""
    todo = []
    for path in files:
        st = path.stat()
        seen = db.loaded.get(str(path))
        if seen != {"size": st.st_size, "mtime": st.st_mtime, "graph": graph}:
            todo.append((path, {"size": st.st_size, "mtime": st.st_mtime, "graph": graph}))
    if not todo:
        return []
    adds = " ".join(f"ld_add('{path}', '{graph}');" for path, _ in todo)
    db.bulk_load(adds)
    failed = db.isql(
        f"SELECT ll_file, ll_error FROM DB.DBA.LOAD_LIST WHERE ll_error IS NOT NULL AND ll_graph = '{graph}';"
    )
    bad = [str(p) for p, _ in todo if str(p) in failed]
    if bad:
        raise VirtuosoError(f"Virtuoso could not load {bad[0]}: {' '.join(failed.split())[-300:]}")
    db.loaded.update((str(p), record) for p, record in todo)
    db.save()
    return [p for p, _ in todo]


def serve(
    files: Sequence[str | Path], folder: str | Path, graph: str, sql_port: int = 1111, http_port: int = 8890
) -> tuple[Database, list[Path]]:
    """The database in ``folder`` running (started if it is not; its ports are the ones it was made with)
    and holding ``files`` in ``graph`` (each loaded once); the files loaded now."""
    paths = check_files(files)
    db = Database.open(folder, sql_port, http_port)
    dirs = sorted({str(p.parent) for p in paths} | set(db.allowed))
    running = db.answers()
    if running and dirs != db.allowed:  # a new folder to load from: the ini changes, so a restart
        stop(db)
        running = False
    db.allowed = dirs
    if not running:
        start(db)
    db.save()
    return db, load(db, paths, graph)
