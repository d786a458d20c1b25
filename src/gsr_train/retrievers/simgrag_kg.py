"""SimGRAG on the whole KG, as its paper runs it: a known pattern node's candidates are the ``k_node``
nearest of *all* the store's named entities and a known relation's the ``k_rel`` nearest of all its
relations (through `gsr_train.text.store_embeddings.StoreVectors`' vector indexes); then the
exact pruned search over the store (`gsr_train.patterns.store_search`). Its per-question form,
`gsr_train.retrievers.simgrag`, takes the nearest within each question's graph instead.

Pattern texts are matched to the store by name: a node linked to a KG entity (a GSR chain's or a gold
chain's topic) is the store entity of that id or label; a KG relation is the store's relation of that
name. Other texts (an LLM's "Jamaica", "languages spoken") are embedded once with the same encoder.
A node whose entity has no text (a mediator) matches exactly that entity at cost 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from gsr_train.patterns.pattern import Pattern
from gsr_train.patterns.store_search import StoreCosts, StorePatternRun, StorePatternSearch
from gsr_train.retrievers.options import SimGRAGConfig
from gsr_train.text.embeddings import embed_texts
from gsr_train.text.store_embeddings import StoreVectors


class StoreTexts:
    """The vector (or, for a mediator, the entity) of every node and relation text of the patterns."""

    def __init__(self, vectors: StoreVectors, patterns: Sequence[Sequence[Pattern]], encoder=None, cache_dir=None):
        self.vectors = vectors
        store, emb = vectors.store, vectors.emb
        self.node: dict[str, torch.Tensor | int] = {}
        self.rel: dict[str, torch.Tensor] = {}
        todo: set[tuple[str, str]] = set()
        for p in (p for pats in patterns for p in pats):
            for x in p.nodes:
                if x.text is None or x.text in self.node:
                    continue
                ids = store.entities_named(x.text)
                if ids.size and bool(emb.entity_has_text[int(ids[0])]):
                    self.node[x.text] = emb.entity[int(ids[0])].float()
                elif ids.size and x.entity is not None:
                    self.node[x.text] = int(ids[0])  # a linked mediator: exactly that entity
                else:
                    todo.add(("node", x.text))
            for e in p.edges:
                if e.relation is None or e.relation in self.rel:
                    continue
                r = store.relations.get(e.relation)
                if r is not None:
                    self.rel[e.relation] = emb.relation[r].float()
                else:
                    todo.add(("rel", e.relation))
        self._embed(sorted(todo), encoder, cache_dir)

    def _embed(self, todo: list[tuple[str, str]], encoder, cache_dir) -> None:
        if not todo:
            return
        if encoder is None:
            raise ValueError(
                f"{len(todo)} pattern texts are not names of the KG store (e.g. {todo[0][1]!r}); "
                "pass the encoder that embedded the store"
            )
        rows = embed_texts([t for _, t in todo], encoder, cache_dir, kind="pattern_texts")
        for (kind, text), row in zip(todo, rows):
            (self.node if kind == "node" else self.rel)[text] = row.float()


class SimGRAGStoreCosts:
    """A pattern's candidates over the whole store (callable for `StorePatternSearch`)."""

    def __init__(self, texts: StoreTexts, cfg: SimGRAGConfig) -> None:
        self.texts, self.cfg = texts, cfg
        self.num_relations = len(texts.vectors.store.relations)

    def _node(self, text: str | None) -> tuple[np.ndarray, np.ndarray] | None:
        if text is None:
            return None
        found = self.texts.node[text]
        if isinstance(found, int):
            return np.array([found], dtype=np.int64), np.zeros(1)
        ids, dist = self.texts.vectors.entities.search(found[None], self.cfg.k_node)
        keep = ids[0] >= 0
        return ids[0][keep], dist[0][keep]

    def _relation(self, name: str | None) -> np.ndarray:
        if name is None:
            return np.zeros(self.num_relations)
        ids, dist = self.texts.vectors.relations.search(self.texts.rel[name][None], self.cfg.k_rel)
        out = np.full(self.num_relations, np.inf)
        keep = ids[0] >= 0
        out[ids[0][keep]] = dist[0][keep]
        return out

    def __call__(self, pattern: Pattern) -> StoreCosts:
        return StoreCosts(
            [self._node(x.text) for x in pattern.nodes], [self._relation(e.relation) for e in pattern.edges]
        )


def simgrag_store_retrieve(
    vectors: StoreVectors,
    patterns: Sequence[Sequence[Pattern]],
    cfg: SimGRAGConfig | Mapping | None = None,
    encoder=None,
    cache_dir: str | Path | None = None,
    max_region: int = 200_000,
) -> StorePatternRun:
    """SimGRAG over the whole store: ``patterns[q]`` are question ``q``'s patterns (best first)."""
    cfg = SimGRAGConfig.from_mapping(cfg)
    costs = SimGRAGStoreCosts(StoreTexts(vectors, patterns, encoder, cache_dir), cfg)
    return StorePatternSearch(vectors.store, costs, cfg.k, max_region, cfg.max_partial).run(patterns)
