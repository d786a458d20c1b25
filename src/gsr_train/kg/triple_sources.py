"""KG files read as Arrow batches of ``(head, relation, tail)`` strings, streaming, with their bad
lines counted by reason (or the first one named: file, line, why).

Formats, by suffix (``.gz`` read through):

* ``.tsv`` / ``.txt``: ``head<TAB>relation<TAB>tail`` (no quoting); ``.csv``: comma-separated, quoted
  fields allowed. A first line ``head relation tail`` / ``subject predicate object`` is a header.
* ``.parquet``: columns ``head, relation, tail`` (or ``subject, predicate, object``, or ``h, r, t``).
* ``.nt`` / ``.nq``: N-Triples / N-Quads, parsed by pyoxigraph. IRIs and blank nodes are entities;
  a literal object of a label predicate (``rdfs:label``, ``skos:prefLabel``, Freebase's
  ``type.object.name``) is the subject's label, of ``skos:altLabel`` an alias; other literals are
  attributes, not edges (counted). Labels in another language than ``--language`` are left out.
* A names file (``--names``): ``entity<TAB>name`` lines, the first name of an entity its label,
  the others aliases.
"""

from __future__ import annotations

import gzip
import io
import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gsr_train.data.errors import UserError

FORMATS = ("tsv", "csv", "parquet", "nt", "nq")
HEADERS = {("head", "relation", "tail"), ("subject", "predicate", "object"), ("h", "r", "t"), ("s", "p", "o")}
LABEL_PREDICATES = (
    "http://www.w3.org/2000/01/rdf-schema#label",
    "http://www.w3.org/2004/02/skos/core#prefLabel",
    "http://rdf.freebase.com/ns/type.object.name",
)
ALIAS_PREDICATES = ("http://www.w3.org/2004/02/skos/core#altLabel", "http://rdf.freebase.com/ns/common.topic.alias")
BLOCK_BYTES = 1 << 24  # CSV blocks of 16 MB: the batch boundaries, hence the resume points, are fixed
RDF_LINES = 100_000
PARQUET_ROWS = 1 << 20


class KGImportError(UserError, ValueError):
    """A KG file that cannot be imported as asked (its first bad line named, or unreadable)."""


@dataclass
class BadLines:
    """Bad lines by reason; without ``skip`` the first one stops the import with its place."""

    skip: bool
    counts: Counter = field(default_factory=Counter)
    first: dict[str, str] = field(default_factory=dict)

    def add(self, file: Path, line: int | None, why: str, count: int = 1) -> None:
        where = f"{file}:{line}" if line is not None else str(file)
        if not self.skip:
            raise KGImportError(f"{where}: {why} (--skip_bad counts such lines and leaves them out)")
        self.counts[why] += count
        self.first.setdefault(why, where)

    def record(self) -> dict[str, Any]:
        return {"total": int(sum(self.counts.values())), "by_reason": dict(self.counts), "first": dict(self.first)}


@dataclass
class Batch:
    """One batch of a file: triples, and (RDF, names files) labels and aliases of entities."""

    heads: pa.Array
    relations: pa.Array
    tails: pa.Array
    named: pa.Array | None = None  # entities that get a name here
    names: pa.Array | None = None
    # bool per name: an alias (None: none is); an entity's label is its first non-alias name
    alias: np.ndarray | None = None
    attributes: int = 0  # literal-valued triples left out


@dataclass(frozen=True)
class Chunks:
    """How files are cut into batches. A checkpoint records it and a resumed import cuts its file the
    same way, so its batch count means the same rows whatever this version's defaults."""

    block_bytes: int
    parquet_rows: int
    rdf_lines: int


def default_chunks() -> Chunks:
    return Chunks(BLOCK_BYTES, PARQUET_ROWS, RDF_LINES)


def file_format(path: Path, given: str | None = None) -> str:
    """The format of ``path`` (``given``, or its suffix less ``.gz``)."""
    if given:
        return given
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    suffix = suffixes[-1].lstrip(".") if suffixes else ""
    found = {"txt": "tsv", "tab": "tsv", "ntriples": "nt", "nquads": "nq"}.get(suffix, suffix)
    if found not in FORMATS:
        raise KGImportError(
            f"{path}: unknown KG file type {suffix!r}; use .tsv, .csv, .parquet, .nt or .nq (or --format)"
        )
    return found


def _open_binary(path: Path) -> Any:
    return gzip.open(path, "rb") if path.suffix.lower() == ".gz" else open(path, "rb")


def _first_line(path: Path) -> str:
    with _open_binary(path) as f:
        return f.readline().decode("utf-8", "replace").rstrip("\r\n")


def _empty_rows(batch: Batch) -> np.ndarray:
    empty = np.zeros(len(batch.heads), dtype=bool)
    for column in (batch.heads, batch.relations, batch.tails):
        empty |= np.asarray(pc.fill_null(pc.equal(pc.utf8_length(column), 0), True), dtype=bool)
    return empty


def _drop(batch: Batch, keep: np.ndarray) -> Batch:
    mask = pa.array(keep)
    return Batch(batch.heads.filter(mask), batch.relations.filter(mask), batch.tails.filter(mask))


def _csv_records(
    path: Path, kind: str, columns: Sequence[str], skip_rows: int, bad: BadLines, chunks: Chunks
) -> Iterator[tuple[pa.RecordBatch, int]]:
    """Record batches of a delimited file (every column a string) with the count of rows of a wrong
    field count left out before each; those rows go to ``bad`` with their line. ``kind``: ``csv``
    (commas, quoted fields), else tab-separated without quoting."""
    import pyarrow.csv as csv

    wrong: list[tuple[int | None, str]] = []

    def invalid(row: Any) -> str:
        wrong.append((row.number, f"{row.actual_columns} fields, expected {len(columns)}"))
        return "skip" if bad.skip else "error"

    # one thread: bad rows then carry their line number (the interning, not the parsing, is the cost)
    read = csv.ReadOptions(
        column_names=list(columns), skip_rows=skip_rows, block_size=chunks.block_bytes, use_threads=False
    )
    quoted = kind == "csv"
    parse = csv.ParseOptions(
        delimiter="," if quoted else "\t", quote_char='"' if quoted else False, invalid_row_handler=invalid
    )
    convert = csv.ConvertOptions(column_types=dict.fromkeys(columns, pa.string()))
    try:
        for record in csv.open_csv(pa.input_stream(str(path), compression="detect"), read, parse, convert):
            for number, why in wrong:
                bad.add(path, number, why)
            skipped = len(wrong)
            wrong.clear()
            yield record, skipped
    except pa.ArrowInvalid as e:
        for number, why in wrong:
            bad.add(path, number, why)  # raises: the first bad line, named
        raise KGImportError(f"{path}: cannot be read as {kind.upper()} ({e})") from None
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise KGImportError(f"{path}: cannot be read ({e})") from None


def read_delimited(path: Path, fmt: str, bad: BadLines, chunks: Chunks) -> Iterator[Batch]:
    """A TSV / CSV file in blocks of ``chunks.block_bytes``."""
    delimiter = "\t" if fmt == "tsv" else ","
    header = tuple(part.strip().lower() for part in _first_line(path).split(delimiter)) in HEADERS
    line = 1 + int(header)
    columns = ("head", "relation", "tail")
    for record, skipped in _csv_records(path, fmt, columns, int(header), bad, chunks):
        batch = Batch(*(record.column(i) for i in range(3)))
        empty = _empty_rows(batch)
        if empty.any():
            bad.add(path, line + int(np.flatnonzero(empty)[0]) + skipped, "an empty field", int(empty.sum()))
            batch = _drop(batch, ~empty)
        line += record.num_rows + skipped
        yield batch


def read_parquet(path: Path, bad: BadLines, chunks: Chunks) -> Iterator[Batch]:
    """A parquet file, ``chunks.parquet_rows`` rows at a time."""
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as e:
        raise KGImportError(f"{path}: cannot be read as parquet ({e})") from None
    present = set(handle.schema_arrow.names)
    columns = next(
        (
            c
            for c in (("head", "relation", "tail"), ("subject", "predicate", "object"), ("h", "r", "t"))
            if set(c) <= present
        ),
        None,
    )
    if columns is None:
        raise KGImportError(f"{path}: no head, relation, tail columns (it has {sorted(present)})")
    row = 1
    for record in handle.iter_batches(batch_size=chunks.parquet_rows, columns=list(columns)):
        batch = Batch(*(record.column(i).cast(pa.string()) for i in range(3)))
        empty = _empty_rows(batch)
        if empty.any():
            bad.add(
                path, None, f"an empty or missing field (row {row + int(np.flatnonzero(empty)[0])})", int(empty.sum())
            )
            batch = _drop(batch, ~empty)
        row += record.num_rows
        yield batch


def _term(node: Any) -> str:
    from pyoxigraph import BlankNode

    return f"_:{node.value}" if isinstance(node, BlankNode) else str(node.value)


def _rdf_block(lines: list[bytes], first: int, path: Path, fmt: str, bad: BadLines) -> list[Any]:
    """The statements of ``lines`` (line ``first`` on); a block that does not parse is parsed line by
    line, so each bad line is named or counted alone."""
    from pyoxigraph import RdfFormat, parse

    rdf = RdfFormat.N_QUADS if fmt == "nq" else RdfFormat.N_TRIPLES
    try:
        return list(parse(b"".join(lines), rdf))
    except SyntaxError:
        pass
    out: list[Any] = []
    for k, text in enumerate(lines):
        try:
            out.extend(parse(text, rdf))
        except SyntaxError as e:
            bad.add(path, first + k, f"not {fmt.upper()}: {str(e).splitlines()[0]}")
    return out


def read_rdf(path: Path, fmt: str, bad: BadLines, language: str, chunks: Chunks) -> Iterator[Batch]:
    """N-Triples / N-Quads in blocks of ``chunks.rdf_lines`` lines (the graph name of a quad is left out)."""
    from pyoxigraph import Literal

    labels, aliases = set(LABEL_PREDICATES), set(ALIAS_PREDICATES)
    try:
        with _open_binary(path) as handle:
            stream = iter(io.BufferedReader(handle))
            line = 1
            while block := list(itertools.islice(stream, chunks.rdf_lines)):
                heads, rels, tails, named, names, alias = [], [], [], [], [], []
                attributes = 0
                for statement in _rdf_block(block, line, path, fmt, bad):
                    predicate, obj = statement.predicate.value, statement.object
                    if isinstance(obj, Literal):
                        if predicate in labels or predicate in aliases:
                            if obj.language in (None, "", language):
                                named.append(_term(statement.subject))
                                names.append(obj.value)
                                alias.append(predicate in aliases)
                        else:
                            attributes += 1
                        continue
                    heads.append(_term(statement.subject))
                    rels.append(predicate)
                    tails.append(_term(obj))
                line += len(block)
                yield Batch(
                    pa.array(heads, pa.string()),
                    pa.array(rels, pa.string()),
                    pa.array(tails, pa.string()),
                    pa.array(named, pa.string()),
                    pa.array(names, pa.string()),
                    np.asarray(alias, dtype=bool),
                    attributes,
                )
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise KGImportError(f"{path}: cannot be read ({e})") from None


def read_names(path: Path, bad: BadLines, chunks: Chunks) -> Iterator[Batch]:
    """A names file: ``entity<TAB>name`` lines (an entity's first name is its label, the rest aliases)."""
    empty = pa.array([], pa.string())
    for record, _ in _csv_records(path, "names tsv", ("entity", "name"), 0, bad, chunks):
        yield Batch(empty, empty, empty, record.column(0), record.column(1), None)


def read_triples(path: Path, fmt: str, bad: BadLines, language: str, chunks: Chunks) -> Iterator[Batch]:
    """The batches of one KG file of format ``fmt`` (see `FORMATS`), cut as ``chunks`` says."""
    if fmt in ("tsv", "csv"):
        return read_delimited(path, fmt, bad, chunks)
    if fmt == "parquet":
        return read_parquet(path, bad, chunks)
    return read_rdf(path, fmt, bad, language, chunks)
