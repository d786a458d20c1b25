"""``gsr-train serve-kg``: a local Virtuoso database made, loaded (each file once), started, killed with
-9 and started again with what it held, stopped; a wrong file or a taken port is one line before anything
starts."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .virtuoso import free_port, need_virtuoso

pytestmark = pytest.mark.virtuoso
GSR = str(Path(sys.executable).parent / "gsr-train")


def _nt(path: Path, n: int, prefix: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(f"<http://ex.org/{prefix}{i}> <http://ex.org/r> <http://ex.org/{prefix}{i + 1}> .\n" for i in range(n))
    )
    return path


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([GSR, "serve-kg", *args], capture_output=True, text=True, timeout=300)


def _count(endpoint: str) -> int:
    query = "SELECT (COUNT(*) AS ?n) WHERE { GRAPH <urn:gsr-train:kg> { ?s ?p ?o } }"
    body = httpx.post(endpoint, data={"query": query}, headers={"Accept": "application/sparql-results+json"}).json()
    return int(body["results"]["bindings"][0]["n"]["value"])


def test_serve_kg_loads_once_survives_kill_9_and_stops(tmp_path):
    need_virtuoso()
    http, sql = free_port(), free_port()
    first, second = _nt(tmp_path / "a" / "kg.nt", 30, "a"), _nt(tmp_path / "b" / "more.nt", 12, "b")
    db = ["--db", str(tmp_path / "kgdb"), "--port", str(http), "--sql_port", str(sql)]
    try:
        made = _serve(str(first), *db)
        assert made.returncode == 0, made.stderr[-2000:]
        endpoint = f"http://localhost:{http}/sparql"
        assert f"SPARQL endpoint: {endpoint}" in made.stdout and f"loaded {first}" in made.stdout
        assert _count(endpoint) == 30
        again = _serve(str(first), *db)
        assert again.returncode == 0 and "loaded" not in again.stdout  # nothing new
        more = _serve(str(first), str(second), *db)  # a file from another folder: restarted to allow it
        assert f"loaded {second}" in more.stdout and f"loaded {first}" not in more.stdout
        assert _count(endpoint) == 42
        pid = int(re.search(r"VIRT_PID=(\d+)", (tmp_path / "kgdb" / "virtuoso.lck").read_text()).group(1))
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        back = _serve(str(first), str(second), *db)  # the stale lock file gone, what was loaded still there
        assert back.returncode == 0 and "loaded" not in back.stdout, back.stderr[-2000:]
        assert _count(endpoint) == 42
    finally:
        stopped = _serve(*db, "--stop")
    assert stopped.returncode == 0 and "stopped the database" in stopped.stdout
    assert "no database answers" in _serve(*db, "--stop").stdout


def test_serve_kg_mistakes_are_one_line_before_anything_starts(tmp_path):
    need_virtuoso()
    tsv = tmp_path / "kg.tsv"
    tsv.write_text("a\tr\tb\n")
    for args, says in (
        ([str(tsv)], "kg.tsv: not an RDF file Virtuoso loads"),
        ([str(tmp_path / "none.nt")], "none.nt: no such file"),
    ):
        done = _serve(*args, "--db", str(tmp_path / "kgdb"))
        assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith("error: ")
        assert says in done.stderr and "Traceback" not in done.stderr
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        nt = _nt(tmp_path / "kg.nt", 3, "x")
        done = _serve(str(nt), "--db", str(tmp_path / "kgdb"), "--port", str(port), "--sql_port", str(free_port()))
    assert done.returncode == 2 and f"HTTP port {port} in use" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "kgdb" / "virtuoso.db").exists()  # nothing started


def _fake_isql(tmp_path: Path, monkeypatch, seconds: float) -> Path:
    """``isql-vt`` and ``virtuoso-t`` on PATH as scripts: the client answers after ``seconds`` and logs its
    arguments (no database needed: what is tested is how long the project waits for it)."""
    import gsr_train.kg.virtuoso as virtuoso

    bin_dir, log = tmp_path / "bin", tmp_path / "isql.log"
    bin_dir.mkdir()
    (bin_dir / "isql-vt").write_text(f'#!/bin/sh\necho "$4" >> {log}\nexec sleep {seconds}\n')  # killed at the limit
    (bin_dir / "virtuoso-t").write_text("#!/bin/sh\n")
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    ini = tmp_path / "virtuoso.ini"
    ini.write_text("[Parameters]\n")
    monkeypatch.setattr(virtuoso, "BASE_INI", ini)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_a_statement_past_its_limit_is_one_line_naming_the_database(tmp_path, monkeypatch):
    from gsr_train.kg.virtuoso import Database, VirtuosoError

    _fake_isql(tmp_path, monkeypatch, seconds=5)
    db = Database(tmp_path / "kgdb", 1111, 8890)
    with pytest.raises(VirtuosoError) as caught:
        db.isql("SELECT COUNT(*) FROM DB.DBA.LOAD_LIST;", timeout=0.5)
    said = str(caught.value)
    assert "\n" not in said and str(tmp_path / "kgdb") in said and "SQL port 1111" in said
    assert "'SELECT COUNT(*) FROM DB.DBA.LOAD_LIST;'" in said and "within 0.5 s" in said


def test_a_bulk_load_is_waited_for_however_long_it_takes(tmp_path, monkeypatch):
    """A 100M-triple load outlives any fixed limit (the old hour would have ended serve-kg with a traceback,
    the database still loading); every other statement keeps one."""
    import gsr_train.kg.virtuoso as virtuoso

    log = _fake_isql(tmp_path, monkeypatch, seconds=1.5)
    monkeypatch.setattr(virtuoso.Database.isql, "__defaults__", (1.0,))  # every limited statement: 1 s
    db = virtuoso.Database(tmp_path / "kgdb", 1111, 8890)
    nt = _nt(tmp_path / "kg.nt", 3, "x")
    with pytest.raises(virtuoso.VirtuosoError, match="within 1 s"):
        db.isql("checkpoint;")  # the limit holds for the rest
    log.unlink()
    with pytest.raises(virtuoso.VirtuosoError, match="LOAD_LIST"):  # the load itself waited; the check after it did not
        virtuoso.load(db, [nt], "urn:gsr-train:kg")
    statements = log.read_text().splitlines()
    assert statements[0] == f"exec=ld_add('{nt}', 'urn:gsr-train:kg'); rdf_loader_run(); checkpoint;"
    assert len(statements) == 2 and "LOAD_LIST" in statements[1]
