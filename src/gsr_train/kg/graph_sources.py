"""Where ``data.kg`` cuts question graphs from: a whole-KG store folder or a SPARQL endpoint, behind one
interface, so `gsr_train.kg.extracted_data` writes the same rows from either.

A source finds a topic entity by name (an id or IRI, else a label), links a question to the entity it
names (``links``: whether it was asked to), lists the entities the question's phrases label
(`gsr_train.kg.label_linking`: the same candidates from a store and an endpoint), cuts the question's
graph around topic entities, names entities as the graph names them (a label, else the id), and says
what it is (``where``) and what identifies its content (``key``, part of the cached folder's key).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from gsr_train.io import stable_hash
from gsr_train.kg.extract import Extractor
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.label_linking import phrases, rank
from gsr_train.kg.linking import EntityLinker
from gsr_train.kg.sparql import (
    SparqlClient,
    batched,
    degree_query,
    exists_query,
    is_iri,
    labelled_query,
    labels_query,
    named_query,
)
from gsr_train.kg.sparql_chains import SparqlChains
from gsr_train.kg.sparql_extract import SparqlExtractor
from gsr_train.kg.sparql_options import SparqlOptions, is_endpoint
from gsr_train.kg.store import open_store


class GraphSource(Protocol):
    where: str
    key: str
    links: bool

    def find(self, names: Sequence[str]) -> list[Any | None]: ...
    def link(self, question: str) -> Any | None: ...
    def candidates(self, question: str) -> list[tuple[Any, str]]: ...
    def cut(self, topics: Sequence[Any]) -> pa.ListArray: ...
    def display(self, entities: Sequence[Any]) -> list[str]: ...
    def close(self) -> None: ...


def triples_array(heads: pa.Array, relations: pa.Array, tails: pa.Array) -> pa.ListArray:
    """Three string columns as one list<string> of ``[head, relation, tail]`` triples, in one Arrow call."""
    n = len(heads)
    values = pa.concat_arrays([a.cast(pa.large_string()) for a in (heads, relations, tails)])
    order = np.stack([np.arange(n), np.arange(n) + n, np.arange(n) + 2 * n], axis=1).ravel()
    flat = values.take(pa.array(order)).cast(pa.string())
    return pa.ListArray.from_arrays(pa.array(np.arange(0, 3 * n + 1, 3, dtype=np.int32)), flat)


class StoreGraphs:
    """Graphs cut from a store folder (gsr-train import-kg); entities are store ids."""

    def __init__(self, folder: str | Path, options: ExtractOptions, link: bool) -> None:
        self.store = open_store(folder)
        self.extractor = Extractor(self.store, options)
        self.linker = EntityLinker(self.store) if link else None
        self.links = link
        self.where, self.key = f"the KG store {self.store.folder}", self.store.key

    def find(self, names: Sequence[str]) -> list[int | None]:
        """Each name's entity (its id, else the first it labels), or None."""
        found = [self.store.entities_named(name) for name in names]
        return [int(f[0]) if f.size else None for f in found]

    def link(self, question: str) -> int | None:
        """The store's own linker's best entity (`gsr_train.kg.linking`)."""
        linked = self.linker.link(question, 1) if self.linker is not None else []
        return linked[0][0] if linked else None

    def candidates(self, question: str) -> list[tuple[int, str]]:
        spans = dict(phrases(question))
        named = {p: [int(e) for e in self.store.entities_named(p)] for p in spans}
        degree = self.store.degree
        return rank(
            named, spans, lambda es: degree(np.asarray(es)).tolist(), lambda e: str(self.store.entities.take([e])[0])
        )

    def display(self, entities: Sequence[int]) -> list[str]:
        ids = np.asarray(entities, dtype=np.int64)
        return [str(x) for x in self.store.display_names(ids).to_pylist()] if ids.size else []

    def cut(self, topics: Sequence[int]) -> pa.ListArray:
        s = self.store
        edges = self.extractor.edges(np.asarray(topics, dtype=np.int64))
        heads = s.display_names(np.asarray(s.heads[edges], dtype=np.int64))
        tails = s.display_names(np.asarray(s.tails[edges], dtype=np.int64))
        rels = s.relations.to_arrow().take(pa.array(np.asarray(s.rels[edges], dtype=np.int64)))
        return triples_array(heads, rels, tails)

    def close(self) -> None:
        pass


class SparqlGraphs:
    """Graphs cut from a SPARQL endpoint; entities are IRIs (a label names one too)."""

    def __init__(
        self, endpoint: str, options: ExtractOptions, sparql: SparqlOptions, cache_dir: Path | None, link: bool = False
    ) -> None:
        self.client = SparqlClient(endpoint, sparql, cache_dir)
        self.extractor = SparqlExtractor(self.client, options)
        self.chains = SparqlChains(self.client)
        self.links = link
        self.sparql = sparql
        self.where = f"the SPARQL endpoint {self.client.endpoint}"
        self.key = stable_hash(
            "sparql", self.client.endpoint, sparql.graph, sparql.limit, list(sparql.labels), sparql.language
        )
        self._labels: dict[str, str | None] = {}

    def find(self, names: Sequence[str]) -> list[str | None]:
        """Each name's entity (an IRI with an edge, else the first IRI it labels), or None; the names'
        queries in flight together (``data.sparql.concurrency``), as a row's answers are many."""
        labels, language = self.sparql.labels, self.sparql.language
        queries = [exists_query(n) if is_iri(n) else named_query(n, labels, language) for n in names]
        found: list[str | None] = []
        for name, rows in zip(names, self.client.select_many(queries), strict=True):
            if is_iri(name):
                found.append(name if rows else None)
            else:
                found.append(rows[0]["e"] if rows and "e" in rows[0] else None)
        return found

    def link(self, question: str) -> str | None:
        """The best of `candidates` (the endpoint has no fuzzy index; its labels are looked up)."""
        found = self.candidates(question)
        return found[0][0] if found else None

    def candidates(self, question: str) -> list[tuple[str, str]]:
        spans = dict(phrases(question))
        queries = [
            labelled_query(b, self.sparql.labels, self.sparql.language) for b in batched(list(spans), self.sparql.batch)
        ]
        named: dict[str, list[str]] = {}
        for rows in self.client.select_many(queries):
            for row in rows:
                if "l" in row and "e" in row and row["l"] in spans:
                    named.setdefault(row["l"], []).append(row["e"])
        return rank(named, spans, self._degrees, str)

    def _degrees(self, entities: list[str]) -> list[int]:
        queries = [degree_query(b) for b in batched(sorted(entities), self.sparql.batch)]
        found = {r["e"]: int(r.get("n", 0)) for rows in self.client.select_many(queries) for r in rows if "e" in r}
        return [found.get(e, 0) for e in entities]

    def _fetch_labels(self, entities: Sequence[str]) -> None:
        todo = sorted({e for e in entities if e not in self._labels and not e.startswith(("_:", "nodeID://"))})
        if not todo:
            return
        rank = {p: i for i, p in enumerate(self.sparql.labels)}
        queries = [labels_query(b, self.sparql.labels, self.sparql.language) for b in batched(todo, self.sparql.batch)]
        best: dict[str, tuple[int, str]] = {}
        for rows in self.client.select_many(queries):
            for row in rows:  # the first predicate's label, then the smallest
                e, label = row.get("e"), row.get("l")
                if e is None or label is None:
                    continue
                choice = (rank.get(row.get("p", ""), len(rank)), label)
                if e not in best or choice < best[e]:
                    best[e] = choice
        for e in todo:
            self._labels[e] = best[e][1] if e in best else None

    def display(self, entities: Sequence[str]) -> list[str]:
        self._fetch_labels(entities)
        return [self._labels.get(e) or e for e in entities]

    def cut(self, topics: Sequence[str]) -> pa.ListArray:
        triples = self.extractor.cut(list(topics)).triples
        if not triples:
            return triples_array(pa.array([], pa.string()), pa.array([], pa.string()), pa.array([], pa.string()))
        heads, rels, tails = (list(c) for c in zip(*triples))
        return triples_array(pa.array(self.display(heads)), pa.array(rels), pa.array(self.display(tails)))

    def close(self) -> None:
        self.client.close()


def open_graph_source(
    kg: str, options: ExtractOptions, sparql: SparqlOptions | None, cache_dir: Path, link: bool
) -> GraphSource:
    """The source ``data.kg`` names: an http(s) URL is a SPARQL endpoint, anything else a store folder."""
    if not is_endpoint(kg):
        return StoreGraphs(kg, options, link)
    return SparqlGraphs(kg, options, sparql or SparqlOptions(), cache_dir, link)
