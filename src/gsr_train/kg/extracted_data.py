"""Questions without graphs + a whole-KG store -> a dataset folder every method reads (``data.kg``).

A RoG row with no ``graph`` gets the graph cut around its topic entities from the store
(:mod:`gsr_train.kg.extract`); a row with a graph keeps it. The topic and answer entities are
written as the store names them (an entity's label, else its id), so they match the graph's
names. The folder, one parquet file per split in the RoG schema, is cached under
``<cache>/extracted/`` by the rows' files, the store and the options, written atomically and
reused by every later run: training, ``eval.py``, the readers, ``gsr-train score``, sweeps and
resumed runs read it like any dataset.

A topic entity the store does not know is counted; a question none of whose topic entities it
knows is an error naming the question, or (``skip_invalid``) left out and counted. With ``link``, a
row without ``q_entity`` gets the entity its question names (:mod:`gsr_train.kg.linking`).
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
from gsr_train.kg.extract import Extractor
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.index import source_fingerprint
from gsr_train.kg.linking import EntityLinker, LinkOptions
from gsr_train.kg.store import KGStore, open_store

log = logging.getLogger(__name__)

ROWS_PER_GROUP = 512
SUMMARY_FILE = "extract.json"
FORMAT = 1


class _Split:
    """One split's rows with their graphs, written a row group at a time."""

    def __init__(self, store: KGStore, extractor: Extractor, skip: bool, linker: EntityLinker | None = None) -> None:
        self.store, self.extractor, self.skip, self.linker = store, extractor, skip, linker
        self.counts = dict.fromkeys(("questions", "extracted", "kept_graph", "linked", "skipped", "unknown_topics"), 0)
        self.counts["triples"] = 0
        self.first_unknown: str | None = None
        self.seconds = 0.0

    def _topics(self, source: str, row_id: str, record: dict) -> list[int]:
        """The row's topic entities in the store: its ``q_entity`` found by name, or (none given and
        ``data.link``) the best linked one; none: an error naming the row, or a counted skip."""
        topics = string_list(record.get("q_entity") or [], source, row_id, "q_entity")
        ids = [self._entity(t) for t in topics]
        unknown = [t for t, i in zip(topics, ids) if i is None]
        if unknown:
            self.counts["unknown_topics"] += len(unknown)
            self.first_unknown = self.first_unknown or f"{source}: row {row_id!r}: {unknown[0]!r}"
        known = [i for i in ids if i is not None]
        if not topics and self.linker is not None:
            linked = self.linker.link(str(record.get("question", "")), 1)
            known = [linked[0][0]] if linked else []
            self.counts["linked"] += bool(known)
        if known:
            return known
        if self.skip:
            self.counts["skipped"] += 1
            return []
        if topics:
            why = f"no topic entity of {list(topics)!r} is in the KG store {self.store.folder}"
        elif self.linker is not None:
            why = "no q_entity, and no entity of the KG store is named in the question"
        else:
            why = "no q_entity (data.link=true finds it in the question)"
        raise RowError(source, row_id, "q_entity", f"{why} (data.skip_invalid=true leaves such questions out, counted)")

    def _entity(self, name: str) -> int | None:
        found = self.store.entities_named(name)
        return int(found[0]) if found.size else None

    def _display(self, ids: Sequence[int]) -> list[str]:
        return [str(x) for x in self.store.display_names(np.asarray(ids, dtype=np.int64)).to_pylist()] if ids else []

    def row(self, source: str, record: dict) -> tuple[dict, pa.Array] | None:
        """The row (topics and answers as the store names them) and its graph as triples."""
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
        edges = self.extractor.edges(np.asarray(known, dtype=np.int64))
        self.seconds += time.perf_counter() - t0
        self.counts["extracted"] += 1
        self.counts["triples"] += int(edges.size)
        answers = string_list(record.get("a_entity") or [], source, row_id, "a_entity")
        answer_ids = [self._entity(a) for a in answers]
        named = {**record, "q_entity": self._display(known)}
        named["a_entity"] = [a if i is None else self._display([i])[0] for a, i in zip(answers, answer_ids)]
        return named, self._triples(edges)

    def _triples(self, edges: np.ndarray) -> pa.Array:
        s = self.store
        heads = s.display_names(np.asarray(s.heads[edges], dtype=np.int64))
        tails = s.display_names(np.asarray(s.tails[edges], dtype=np.int64))
        rels = s.relations.to_arrow().take(pa.array(np.asarray(s.rels[edges], dtype=np.int64)))
        n = int(edges.size)
        values = pa.concat_arrays([heads.cast(pa.large_string()), rels, tails.cast(pa.large_string())])
        order = np.stack([np.arange(n), np.arange(n) + n, np.arange(n) + 2 * n], axis=1).ravel()
        flat = values.take(pa.array(order)).cast(pa.string())
        return pa.ListArray.from_arrays(pa.array(np.arange(0, 3 * n + 1, 3, dtype=np.int32)), flat)


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
    source: str, splits: Sequence[str], store: KGStore, options: ExtractOptions, skip: bool, link: bool
) -> str:
    prints = {split: source_fingerprint(source, split) for split in splits}
    return stable_hash(
        "extracted", FORMAT, prints, store.key, asdict(options), bool(skip), asdict(LinkOptions()) if link else None
    )


def ensure_graphs(
    source: str | Path,
    kg: str | Path,
    splits: Sequence[str],
    cache_dir: Path,
    options: ExtractOptions | None = None,
    skip_invalid: bool = False,
    link: bool = False,
) -> Path:
    """The folder of ``source``'s splits with every missing graph cut from the store ``kg`` (built
    once, then reused); ``link``: a row without ``q_entity`` gets the entity the question names."""
    options = options or ExtractOptions()
    store = open_store(kg)
    key = extracted_key(str(source), splits, store, options, skip_invalid, link)
    folder = Path(cache_dir) / "extracted" / f"{Path(str(source)).name}-{key}"
    if (folder / SUMMARY_FILE).exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(folder.parent / f".{folder.name}.lock"):
        if (folder / SUMMARY_FILE).exists():
            return folder
        extractor, summary = Extractor(store, options), {}
        linker = EntityLinker(store) if link else None
        with atomic_dir(folder) as tmp:
            for split in splits:
                job = _Split(store, extractor, skip_invalid, linker)
                _write_split(str(source), split, job, tmp / f"{split}.parquet")
                summary[split] = _summary(job)
                log.info("data.kg: %s %s", split, _describe(summary[split]))
            write_json(
                tmp / SUMMARY_FILE,
                {"source": str(source), "kg": str(kg), "options": asdict(options), "splits": summary},
            )
    return folder


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
