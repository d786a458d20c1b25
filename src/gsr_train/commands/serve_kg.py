"""Serve a KG from a local Virtuoso database over SPARQL, for ``data.kg=URL`` and ``gsr-train ask --kg URL``.

    gsr-train serve-kg my_kg.nt --db kgdb            # made, loaded once, started in the background
    gsr-train serve-kg more.nt.gz --db kgdb          # loads what is new; a running database stays up
    gsr-train serve-kg --db kgdb --stop

Needs Debian's ``virtuoso-opensource`` (``virtuoso-t``, ``isql-vt``). The database lives in ``--db``
(`gsr_train.kg.virtuoso`): its own ini, ports (``--port`` for SPARQL over HTTP, ``--sql_port``
for its SQL client; fixed when the folder is made), and the RDF files bulk-loaded into ``--graph``,
each once. It prints the endpoint's URL.
"""

from __future__ import annotations

from typing import Annotated

import typer

from gsr_train.commands import run as run_verb
from gsr_train.data.errors import report_user_errors


def command(
    files: Annotated[list[str] | None, typer.Argument(help="RDF files to load: .nt .nq .ttl (each may be .gz)")] = None,
    db: Annotated[str, typer.Option("--db", help="the database's folder (made on first use)")] = "kgdb",
    graph: Annotated[str, typer.Option("--graph", help="the named graph the files go into")] = "urn:gsr-train:kg",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="SPARQL over HTTP (a new folder)")] = 8890,
    sql_port: Annotated[int, typer.Option("--sql_port", min=1, max=65535, help="its SQL port (a new folder)")] = 1111,
    stop: Annotated[bool, typer.Option("--stop", help="shut the database down (what it holds stays)")] = False,
) -> dict:
    """Serve a KG from a local Virtuoso database over SPARQL: load RDF files once, start it, print its URL."""
    return report_user_errors(_serve, files or [], db, graph, port, sql_port, stop)


def _serve(files: list[str], folder: str, graph: str, port: int, sql_port: int, stop: bool) -> dict:
    from gsr_train.kg import virtuoso

    if stop:
        database = virtuoso.Database.open(folder, sql_port, port)
        if database.answers():
            virtuoso.stop(database)
            print(f"stopped the database in {database.folder}")
        else:
            print(f"no database answers at {database.endpoint} ({database.folder})")
        return {"stopped": str(database.folder)}
    database, loaded = virtuoso.serve(files, folder, graph, sql_port, port)
    for path in loaded:
        print(f"loaded {path} into <{graph}>")
    print(f"SPARQL endpoint: {database.endpoint}  ({len(database.loaded)} files in {database.folder})")
    print(f"read it with: data.kg={database.endpoint} data.sparql.graph={graph}")
    return {"endpoint": database.endpoint, "loaded": [str(p) for p in loaded], "files": sorted(database.loaded)}


def main(argv: list[str] | None = None) -> dict:
    return run_verb(command, argv, "gsr-train serve-kg")
