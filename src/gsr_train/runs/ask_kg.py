"""Where ``gsr-train ask`` takes a question's graph from: a whole-KG store or a SPARQL endpoint, behind one
interface, so `gsr_train.runs.pipeline.Pipeline` scores either the same way.

A KG gives a question's topic entities (named, or linked from the question), and the graph cut around
them as a `gsr_train.kg.index.QuestionGraph` with local ids, the text embeddings of its entities
and relations (what the run's scorer reads) and a way to name its triples. A store's names are embedded
once for the whole store through the embedding cache; an endpoint's graph is embedded as it arrives, each
name once per pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from gsr_train.data.errors import PreflightError
from gsr_train.kg.extract import Extractor
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.graph_sources import SparqlGraphs
from gsr_train.kg.index import QuestionGraph, names_have_text
from gsr_train.kg.linking import EntityLinker
from gsr_train.kg.sparql_options import SparqlOptions, is_endpoint
from gsr_train.kg.store import KGStore, open_store
from gsr_train.text.embeddings import KGEmbeddings, relation_texts
from gsr_train.text.encoders import TextEncoder
from gsr_train.text.store_embeddings import store_embeddings

Triple = tuple[str, str, str]


@dataclass
class CutGraph:
    """A question's graph ready for the scorer, and its triples by name."""

    graph: QuestionGraph
    emb: KGEmbeddings
    triples: list[Triple]


class AskKG(Protocol):
    where: str

    def topics(self, question: str, entities: Sequence[str] | None) -> list[tuple[Any, float]]: ...
    def names(self, topics: Sequence[Any]) -> list[str]: ...
    def cut(self, question: str, topics: Sequence[Any]) -> CutGraph: ...


def _question_graph(question: str, heads, tails, rels, n_nodes: int, topic_mask) -> QuestionGraph:
    return QuestionGraph(
        "ask",
        question,
        [],
        torch.arange(n_nodes),
        torch.from_numpy(np.stack([heads, tails]).astype(np.int64)),
        torch.from_numpy(np.asarray(rels, dtype=np.int64)),
        torch.from_numpy(np.asarray(topic_mask, dtype=bool)),
        torch.zeros(n_nodes, dtype=torch.bool),
    )


class StoreKG:
    """A store folder: its fuzzy linker, its extraction, its names embedded once (cached)."""

    def __init__(
        self, folder: str | Path, encoder: TextEncoder, encoder_cfg: dict, cache: Path, extract: ExtractOptions
    ):
        self.store: KGStore = open_store(folder)
        self.where = f"the KG store {self.store.folder}"
        self.emb = store_embeddings(self.store, encoder, encoder_cfg, cache)
        self.linker = EntityLinker(self.store)
        self.extractor = Extractor(self.store, extract)

    def topics(self, question: str, entities: Sequence[str] | None) -> list[tuple[int, float]]:
        if entities:
            found = [self.store.entities_named(e) for e in entities]
            missing = [e for e, ids in zip(entities, found) if not ids.size]
            if missing:
                raise PreflightError(f"not in {self.where}: {', '.join(map(repr, missing))}")
            return [(int(ids[0]), float("nan")) for ids in found]
        return self.linker.link(question, 1)

    def names(self, topics: Sequence[int]) -> list[str]:
        return [str(n) for n in self.store.display_names(np.asarray(topics, dtype=np.int64)).to_pylist()]

    def cut(self, question: str, topics: Sequence[int]) -> CutGraph:
        s = self.store
        edges = self.extractor.edges(np.asarray(topics, dtype=np.int64))
        ends = np.concatenate([np.asarray(s.heads[edges]), np.asarray(s.tails[edges])]).astype(np.int64)
        nodes, local = np.unique(ends, return_inverse=True)
        local = local.reshape(2, -1)
        graph = _question_graph(question, local[0], local[1], s.rels[edges], nodes.size, np.isin(nodes, topics))
        e, index = self.emb, torch.from_numpy(nodes)
        emb = KGEmbeddings(
            e.entity[index].float(), e.entity_has_text[index], e.relation.float(), {}, e.dim, e.encoder_name
        )
        return CutGraph(graph, emb, s.triples(edges))


class EndpointKG:
    """A SPARQL endpoint: label-lookup linking, the same extraction as ``data.kg=URL``, names embedded as
    graphs arrive (each once)."""

    def __init__(
        self,
        endpoint: str,
        encoder: TextEncoder,
        encoder_cfg: dict,
        cache: Path,
        extract: ExtractOptions,
        sparql: SparqlOptions,
    ):
        self.graphs = SparqlGraphs(endpoint, extract, sparql, cache, link=True)
        self.where = self.graphs.where
        self.encoder, self.relation_text = encoder, str(encoder_cfg.get("relation_text") or "raw")
        self._vectors: dict[str, torch.Tensor] = {}

    def topics(self, question: str, entities: Sequence[str] | None) -> list[tuple[str, float]]:
        if entities:
            found = self.graphs.find(entities)
            missing = [e for e, x in zip(entities, found) if x is None]
            if missing:
                raise PreflightError(f"not in {self.where}: {', '.join(map(repr, missing))}")
            return [(str(x), float("nan")) for x in found]
        return [(e, float(len(phrase.split()))) for e, phrase in self.graphs.candidates(question)[:1]]

    def names(self, topics: Sequence[str]) -> list[str]:
        return self.graphs.display(list(topics))

    def _embed(self, texts: list[str]) -> torch.Tensor:
        todo = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if todo:
            self._vectors.update(zip(todo, self.encoder.encode(todo).float()))
        if not texts:
            return torch.zeros(0, self.encoder.dim)
        return torch.stack([self._vectors[t] for t in texts])

    def cut(self, question: str, topics: Sequence[str]) -> CutGraph:
        cut = self.graphs.extractor.cut(list(topics)).triples
        table = np.asarray(cut, dtype=object).reshape(-1, 3).astype(str)
        nodes, local = np.unique(table[:, [0, 2]], return_inverse=True)
        relations, rels = np.unique(table[:, 1], return_inverse=True)
        local = local.reshape(-1, 2).T
        graph = _question_graph(question, local[0], local[1], rels, nodes.size, np.isin(nodes, list(topics)))
        names = self.graphs.display(nodes.tolist())
        has = torch.from_numpy(names_have_text(names).copy())
        entity = self._embed(names) * has[:, None]
        relation = self._embed(list(relation_texts(relations.tolist(), self.relation_text)))
        emb = KGEmbeddings(entity, has, relation, {}, self.encoder.dim, self.encoder.name)
        named = np.asarray(names, dtype=object)
        triples = list(zip(named[local[0]].tolist(), table[:, 1].tolist(), named[local[1]].tolist()))
        return CutGraph(graph, emb, triples)


def open_ask_kg(
    kg: str | Path, encoder: TextEncoder, encoder_cfg: dict, cache: Path, extract: ExtractOptions, sparql: SparqlOptions
) -> AskKG:
    """``kg`` as ``data.kg`` reads it: an http(s) URL is a SPARQL endpoint, anything else a store folder."""
    if is_endpoint(kg):
        return EndpointKG(str(kg), encoder, encoder_cfg, cache, extract, sparql)
    return StoreKG(kg, encoder, encoder_cfg, cache, extract)
