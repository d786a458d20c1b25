"""SimGRAG retrieval (papers/simgrag.txt): top-k subgraphs by graph semantic distance.

For each pattern, SimGRAG's candidate sets are nearest neighbours by L2 embedding distance,
restricted to the question's graph: the ``k_node`` closest entities of every known pattern
node and the ``k_rel`` closest relations of every known pattern relation. UNKNOWN nodes
and relations match anything at distance 0. The exact search with lower-bound pruning and
greedy order is `gsr_train.patterns.search.topk_matches`.

Entities without text (Freebase MIDs of CVT nodes, e.g. ``m.02h98gq``) have zero embedding
rows. They never become candidates of a *known* node (their distance would be meaningless)
and match UNKNOWN nodes like any entity, which is how a CVT in the middle of a chain is
reached. A known node already linked to a text-less entity (a GSR chain's topic) matches
exactly that entity at cost 0.

Pattern texts that are KG names reuse the KG embedding row; other texts (an LLM's
"UNKNOWN"-free node "Jamaica", relation "languages spoken") are embedded once with the same
encoder (cached) in `PatternVectors`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from gsr_train.kg.index import KGIndex, QuestionGraph, SplitGraphs
from gsr_train.patterns.pattern import Pattern
from gsr_train.patterns.retrieve import PatternRun, retrieve_split
from gsr_train.retrievers.options import SimGRAGConfig
from gsr_train.text.embeddings import KGEmbeddings, embed_texts


class PatternVectors:
    """Embedding of every pattern node / relation text (KG rows reused, others encoded once)."""

    def __init__(
        self,
        index: KGIndex,
        emb: KGEmbeddings,
        patterns: Sequence[Sequence[Pattern]],
        encoder=None,
        cache_dir: str | Path | None = None,
    ):
        self.emb = emb
        ent = index.entity_lookup()
        rel = index.relation_lookup()
        self.vec: dict[tuple[str, str], torch.Tensor] = {}
        todo: list[tuple[str, str]] = []
        for pats in patterns:
            for p in pats:
                for x in p.nodes:
                    if x.text is not None and x.entity is None:
                        e = ent.get(x.text)
                        if e is not None and bool(emb.entity_has_text[e]):
                            self.vec[("node", x.text)] = emb.entity[e].float()
                        elif ("node", x.text) not in self.vec:
                            todo.append(("node", x.text))
                for ed in p.edges:
                    if ed.relation is not None and ed.relation_id is None:
                        r = rel.get(ed.relation)
                        if r is not None:
                            self.vec[("rel", ed.relation)] = emb.relation[r].float()
                        elif ("rel", ed.relation) not in self.vec:
                            todo.append(("rel", ed.relation))
        todo = sorted(set(todo))
        if todo:
            if encoder is None:
                raise ValueError(
                    f"{len(todo)} pattern texts are not KG names (e.g. {todo[0][1]!r}); "
                    "pass the encoder that made the KG embeddings"
                )

            rows = embed_texts([t for _, t in todo], encoder, cache_dir, kind="pattern_texts")
            if rows.shape[1] != emb.dim:
                raise ValueError(f"encoder gives {rows.shape[1]}-d vectors, the KG embeddings are {emb.dim}-d")
            for i, key in enumerate(todo):
                self.vec[key] = rows[i].float()

    def node(self, p: Pattern, i: int) -> torch.Tensor | None:
        x = p.nodes[i]
        if x.entity is not None:
            return self.emb.entity[x.entity].float() if bool(self.emb.entity_has_text[x.entity]) else None
        return self.vec.get(("node", x.text)) if x.text is not None else None

    def relation(self, p: Pattern, i: int) -> torch.Tensor | None:
        e = p.edges[i]
        if e.relation_id is not None:
            return self.emb.relation[e.relation_id].float()
        return self.vec.get(("rel", e.relation)) if e.relation is not None else None


def l2_to_rows(query: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """``|table[i] - query|`` in float32 without the matmul shortcut (which turns identical
    vectors into ~1e-3 instead of 0 and would break exact-match ties)."""
    return torch.cdist(query[None].float(), table.float(), compute_mode="donot_use_mm_for_euclid_dist")[0]


def nearest_costs(table: torch.Tensor, query: torch.Tensor, allowed: torch.Tensor | None, k: int) -> np.ndarray:
    """L2 distance of ``query`` to every row of ``table``; only the ``k`` nearest allowed rows
    stay finite (float64, ``inf`` elsewhere)."""
    d = l2_to_rows(query, table).double()
    if allowed is not None:
        d = torch.where(allowed, d, torch.full_like(d, math.inf))
    out = torch.full_like(d, math.inf)
    n = int(torch.isfinite(d).sum())
    if n:
        top = torch.topk(d, min(k, n), largest=False).indices
        out[top] = d[top]
    return out.numpy()


def relation_cost(
    num_relations: int, g: QuestionGraph, vec: torch.Tensor | None, emb: KGEmbeddings, k: int
) -> np.ndarray:
    """``[num_relations]`` costs: 0 for an unknown relation, else the k nearest graph relations."""
    if vec is None:
        return np.zeros(num_relations)
    local = torch.unique(g.edge_rel)
    out = np.full(num_relations, math.inf)
    out[local.numpy()] = nearest_costs(emb.relation[local], vec, None, k)
    return out


class SimGRAGCosts:
    """Cost tables of one pattern on one question graph (callable for ``retrieve_split``)."""

    def __init__(self, index: KGIndex, emb: KGEmbeddings, vectors: PatternVectors, cfg: SimGRAGConfig):
        self.num_relations = len(index.relations)
        self.emb, self.vectors, self.cfg = emb, vectors, cfg

    def node_cost(self, g: QuestionGraph, p: Pattern, i: int) -> np.ndarray:
        x = p.nodes[i]
        n = g.num_entities
        if not x.known:
            return np.zeros(n)
        vec = self.vectors.node(p, i)
        if vec is None:  # linked to an entity without text: exactly that entity
            out = np.full(n, math.inf)
            if x.entity is not None:
                out[(g.entity_ids == x.entity).numpy()] = 0.0
            return out
        has = self.emb.entity_has_text[g.entity_ids]
        return nearest_costs(self.emb.entity[g.entity_ids], vec, has, self.cfg.k_node)

    def __call__(self, q: int, g: QuestionGraph, p: Pattern):
        nodes = [self.node_cost(g, p, i) for i in range(len(p.nodes))]
        rels = [
            relation_cost(self.num_relations, g, self.vectors.relation(p, i), self.emb, self.cfg.k_rel)
            for i in range(len(p.edges))
        ]
        return nodes, rels


def simgrag_retrieve(
    index: KGIndex,
    split_name: str | SplitGraphs,
    emb: KGEmbeddings,
    patterns: Sequence[Sequence[Pattern]],
    cfg: SimGRAGConfig | Mapping | None = None,
    encoder=None,
    cache_dir: str | Path | None = None,
) -> PatternRun:
    """SimGRAG over a split: ``patterns[q]`` are question ``q``'s patterns (best first)."""
    cfg = SimGRAGConfig.from_mapping(cfg)
    vectors = PatternVectors(index, emb, patterns, encoder, cache_dir)
    costs = SimGRAGCosts(index, emb, vectors, cfg)
    graphs = index[split_name] if isinstance(split_name, str) else split_name
    return retrieve_split(graphs, patterns, costs, cfg.k, cfg.prune, cfg.max_partial)
