"""Questions without graphs + a whole KG -> a dataset folder every method reads (``data.kg``).

A RoG row with no ``graph`` gets the graph cut around its topic entities from the KG, a store folder
(`gsr_train.kg.extract`) or a SPARQL endpoint (`gsr_train.kg.sparql_extract`), through
`gsr_train.kg.graph_sources`; a row with a graph keeps it. The topic and answer entities are
written as the KG names them (an entity's label, else its id), so they match the graph's
names. The folder, one parquet file per split in the RoG schema, is cached under
``<cache>/extracted/`` by the rows' files, the store and the options, written atomically and
reused by every later run: training, ``eval.py``, the readers, ``gsr-train score``, sweeps and
resumed runs read it like any dataset.

A topic entity the store does not know is counted; a question none of whose topic entities it
knows is an error naming the question, or (``skip_invalid``) left out and counted. With ``link``, a
row without ``q_entity`` gets the entity its question names (a store: `gsr_train.kg.linking`; an
endpoint: `gsr_train.kg.label_linking`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gsr_train.data.errors import RowError
from gsr_train.data.rows import iter_records, string_list
from gsr_train.io import atomic_dir, file_lock, stable_hash, write_json
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.graph_sources import GraphSource, open_graph_source
from gsr_train.kg.index import source_fingerprint
from gsr_train.kg.linking import LinkOptions
from gsr_train.kg.sparql_options import SparqlOptions

log = logging.getLogger(__name__)

ROWS_PER_GROUP = 512
SUMMARY_FILE = "extract.json"
FORMAT = 1


class _Split:
    """One split's rows with their graphs, written a row group at a time."""

    def __init__(self, source: GraphSource, skip: bool) -> None:
        self.source, self.skip = source, skip
        self.counts = dict.fromkeys(("questions", "extracted", "kept_graph", "linked", "skipped", "unknown_topics"), 0)
        self.counts["triples"] = 0
        self.first_unknown: str | None = None
        self.seconds = 0.0

    def _topics(self, source: str, row_id: str, record: dict) -> list[Any]:
        """The row's topic entities in the KG: its ``q_entity`` found by name, or (none given and
        ``data.link``) the best linked one; none: an error naming the row, or a counted skip."""
        topics = string_list(record.get("q_entity") or [], source, row_id, "q_entity")
        ids = self.source.find(topics)
        unknown = [t for t, i in zip(topics, ids) if i is None]
        if unknown:
            self.counts["unknown_topics"] += len(unknown)
            self.first_unknown = self.first_unknown or f"{source}: row {row_id!r}: {unknown[0]!r}"
        known = [i for i in ids if i is not None]
        linking = self.source.links
        if not topics and linking:
            linked = self.source.link(str(record.get("question", "")))
            known = [linked] if linked is not None else []
            self.counts["linked"] += bool(known)
        if known:
            return known
        if self.skip:
            self.counts["skipped"] += 1
            return []
        if topics:
            why = f"no topic entity of {list(topics)!r} is in {self.source.where}"
        elif linking:
            why = f"no q_entity, and no entity of {self.source.where} is named in the question"
        else:
            why = "no q_entity (data.link=true finds it in the question)"
        raise RowError(source, row_id, "q_entity", f"{why} (data.skip_invalid=true leaves such questions out, counted)")

    def row(self, source: str, record: dict) -> tuple[dict, pa.Array] | None:
        """The row (topics and answers as the KG names them) and its graph as triples."""
        row_id = str(record.get("id", "?"))
        self.counts["questions"] += 1
        graph = record.get("graph")
        if graph is not None:
            self.counts["kept_graph"] += 1
            try:  # converted by Arrow in one call (its check: string triples; the index build checks the rest)
                return record, pa.array(graph, pa.list_(pa.string()))
            except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                raise RowError(source, row_id, "graph", f"not a list of string triples ({e})") from None
        known = self._topics(source, row_id, record)
        if not known:
            return None
        t0 = time.perf_counter()
        triples = self.source.cut(known)
        self.seconds += time.perf_counter() - t0
        self.counts["extracted"] += 1
        self.counts["triples"] += len(triples)
        answers = string_list(record.get("a_entity") or [], source, row_id, "a_entity")
        answer_ids = self.source.find(answers)
        named = {**record, "q_entity": self.source.display(known)}
        shown = iter(self.source.display([i for i in answer_ids if i is not None]))  # one lookup a row
        named["a_entity"] = [a if i is None else next(shown) for a, i in zip(answers, answer_ids)]
        return named, triples


def _table(rows: list[dict], graphs: list[pa.Array]) -> pa.Table:
    lengths = np.array([len(g) for g in graphs], dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = pa.concat_arrays(graphs) if graphs else pa.array([], pa.list_(pa.string()))
    columns: dict[str, Any] = {
        "id": pa.array([str(r.get("id")) for r in rows], pa.string()),
        "question": pa.array([r.get("question") for r in rows], pa.string()),
    }
    for name in ("answer", "q_entity", "a_entity", "choices"):
        columns[name] = pa.array([list(map(str, r.get(name) or [])) for r in rows], pa.list_(pa.string()))
    columns["graph"] = pa.ListArray.from_arrays(pa.array(offsets), values)
    return pa.table(columns)


def _write_split(source: str, split: str, job: _Split, path: Path) -> None:
    writer: pq.ParquetWriter | None = None
    rows: list[dict] = []
    graphs: list[pa.Array] = []

    def flush() -> None:
        nonlocal writer
        table = _table(rows, graphs)
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
        rows.clear()
        graphs.clear()

    for file, position, record in iter_records(source, split):
        if isinstance(record, RowError):  # a damaged or truncated file
            raise record
        if not isinstance(record, dict):
            raise RowError(file, f"#{position}", "<row>", f"expected a JSON object, got {type(record).__name__}")
        made = job.row(file, record)
        if made is not None:
            rows.append(made[0])
            graphs.append(made[1])
        if len(rows) >= ROWS_PER_GROUP:
            flush()
    if rows or writer is None:
        flush()
    assert writer is not None
    writer.close()


def extracted_key(
    source: str, splits: Sequence[str], kg_key: str, options: ExtractOptions, skip: bool, link: bool
) -> str:
    prints = {split: source_fingerprint(source, split) for split in splits}
    return stable_hash(
        "extracted", FORMAT, prints, kg_key, asdict(options), bool(skip), asdict(LinkOptions()) if link else None
    )


def ensure_graphs(
    source: str | Path,
    kg: str | Path,
    splits: Sequence[str],
    cache_dir: Path,
    options: ExtractOptions | None = None,
    skip_invalid: bool = False,
    link: bool = False,
    sparql: SparqlOptions | None = None,
) -> Path:
    """The folder of ``source``'s splits with every missing graph cut from ``kg`` (a store folder or a
    SPARQL endpoint's URL; built once, then reused); ``link``: a row without ``q_entity`` gets the
    entity the question names; ``sparql``: how an endpoint is asked."""
    options = options or ExtractOptions()
    graphs = open_graph_source(str(kg), options, sparql, Path(cache_dir), link)
    try:
        key = extracted_key(str(source), splits, graphs.key, options, skip_invalid, link)
        folder = Path(cache_dir) / "extracted" / f"{Path(str(source)).name}-{key}"
        if not (folder / SUMMARY_FILE).exists():
            _extract(str(source), str(kg), splits, folder, graphs, options, skip_invalid)
    finally:
        graphs.close()
    return folder


def _extract(
    source: str,
    kg: str,
    splits: Sequence[str],
    folder: Path,
    graphs: GraphSource,
    options: ExtractOptions,
    skip_invalid: bool,
) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(folder.parent / f".{folder.name}.lock"):
        if (folder / SUMMARY_FILE).exists():
            return
        summary = {}
        with atomic_dir(folder) as tmp:
            for split in splits:
                job = _Split(graphs, skip_invalid)
                _write_split(source, split, job, tmp / f"{split}.parquet")
                summary[split] = _summary(job)
                log.info("data.kg: %s %s", split, _describe(summary[split]))
            write_json(tmp / SUMMARY_FILE, {"source": source, "kg": kg, "options": asdict(options), "splits": summary})


def _summary(job: _Split) -> dict:
    extracted = max(job.counts["extracted"], 1)
    return {
        **job.counts,
        "first_unknown_topic": job.first_unknown,
        "triples_per_question": round(job.counts["triples"] / extracted, 1),
        "ms_per_question": round(1000 * job.seconds / extracted, 3),
    }


def _describe(fig: dict) -> str:
    parts = [f"{fig['extracted']} graphs cut ({fig['triples_per_question']} triples, {fig['ms_per_question']} ms each)"]
    if fig["linked"]:
        parts.append(f"{fig['linked']} topic entities linked from the question")
    if fig["kept_graph"]:
        parts.append(f"{fig['kept_graph']} kept their own")
    if fig["unknown_topics"]:
        parts.append(f"{fig['unknown_topics']} topic entities not in the KG (first: {fig['first_unknown_topic']})")
    if fig["skipped"]:
        parts.append(f"{fig['skipped']} questions skipped: no topic entity in the KG")
    return "; ".join(parts)
