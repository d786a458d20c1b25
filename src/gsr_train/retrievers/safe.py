"""SAFE retrieval (papers/safe.txt): schema-aligned query graphs, then ranked semantic matching.

1. **Typed pseudo query graph**: a `Pattern` whose nodes carry expected types (from
   the LLM, or for chain patterns from the schema's relation domains / ranges,
   `type_path_pattern`).
2. **Candidate schema edges**: for every pseudo edge ``(u, r, u')`` the ``k_schema`` schema
   edges ``(c, r_s, c')`` nearest in L2, either orientation. The composite distance is
   ``sqrt(|t(u)-c|^2 + |r-r_s|^2 + |t(u')-c'|^2)`` over the embedding blocks that are known
   (an unknown type or relation drops its block). This is the L2 distance between
   concatenated [type; relation; type] vectors; the paper embeds the concatenated *text*
   instead, which on CPU would mean embedding ~100k schema edges (20+ minutes with MiniLM)
   for the same purpose. A node linked to an entity (the GSR / gold topic) keeps only its
   entity's types ("we fix the entity's actual type").
3. **Distance edge join** (`distance_join`, Algorithm 1): assign one candidate to every
   pseudo edge so that, for every pseudo node shared by two edges, the schema types given to
   it are within ``delta`` hops in the schema graph; keep the ``k_qg`` assignments of smallest
   total distance. We measure the distance between the types of the *shared* pseudo node;
   the paper's D_edge takes the minimum over all four endpoint pairs, which can call two
   edges joinable through endpoints the pattern does not share. Ours is never smaller, so
   every join is bridgeable by at most ``delta`` edges.
4. **Instantiation** (`instantiate`): every aligned query graph becomes a pattern with
   KG relations and schema types; a shared node whose two types differ by ``d > 0`` hops is
   split in two, joined by ``d`` edges of unknown relation.
5. **Ranked semantic subgraph matching** (Algorithm 2 with SimGRAG's pruning, the same
   exact search as SimGRAG): known nodes match their ``k_ent`` nearest entities by embedding
   (SemDist = L2), typed variables match entities having one of the ``k_type`` nearest types
   (SemDist = smallest type L2 among them). Our types are inferred from relation names and
   so incomplete (an entity only gets the domains of the relations it heads and the ranges
   of those it is reached by), so by default (``hard_types=False``) the other entities stay
   candidates at the largest distance of that set: types rank but do not exclude;
   ``hard_types=True`` is the paper's filter (only untyped entities escape it). Untyped
   variables match anything at 0, relations their
   ``k_rel`` nearest graph relations. A subgraph's final distance adds its query graph's join
   distance, and the subgraphs of all query graphs are merged.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from gsr_train.arrays import scatter
from gsr_train.kg.index import KGIndex, QuestionGraph, SplitGraphs
from gsr_train.kg.schema import (
    EntityTypes,
    SchemaGraph,
    build_schema,
    infer_entity_types,
    relation_domain,
    split_triples,
)
from gsr_train.patterns.pattern import Pattern, PatternEdge, PatternNode
from gsr_train.patterns.retrieve import PatternRun, retrieve_split
from gsr_train.retrievers.options import SAFEConfig
from gsr_train.retrievers.simgrag import PatternVectors, l2_to_rows, nearest_costs, relation_cost
from gsr_train.text.embeddings import KGEmbeddings, embed_texts


@dataclass
class SchemaResources:
    """Everything SAFE precomputes once per KG: entity types, schema graph, type vectors."""

    entity_types: EntityTypes
    schema: SchemaGraph
    type_emb: torch.Tensor  # [T, d]
    type_ptr: torch.Tensor  # CSR entity -> pairs
    type_lookup: dict[str, int]
    seconds: float = 0.0

    @classmethod
    def build(
        cls, index: KGIndex, splits: Sequence[str], encoder, cache_dir: str | Path | None, cfg: SAFEConfig
    ) -> SchemaResources:

        t0 = time.perf_counter()
        triples = split_triples(index, splits)
        et = infer_entity_types(index.entities, index.relations, triples)
        schema = build_schema(et, triples, cfg.min_support, cfg.min_confidence, cfg.max_distance, index.relations)
        type_emb = embed_texts(schema.types, encoder, cache_dir, kind="schema_types").float()
        return cls(et, schema, type_emb, et.ptr(), {t: i for i, t in enumerate(schema.types)}, time.perf_counter() - t0)


# ----------------------------------------------------------------------------- typing chains


def type_path_pattern(p: Pattern, res: SchemaResources, relations: Sequence[str]) -> Pattern:
    """Expected types for a chain pattern: a node is typed by the domain of the relation it
    heads next, else by the range of the relation that reached it; the linked topic keeps
    the domain of its first relation when the entity has that type, else its first type."""
    rng = res.entity_types.relation_range
    types: list[str | None] = []
    for i, node in enumerate(p.nodes):
        out_edge = next((e for e in p.edges if e.head == i), None)
        in_edge = next((e for e in p.edges if e.tail == i), None)
        t = None
        if out_edge is not None:
            rel = out_edge.relation if out_edge.relation is not None else None
            t = relation_domain(rel) if rel else None
        if t is None and in_edge is not None and in_edge.relation_id is not None and in_edge.relation_id in rng:
            t = res.schema.types[rng[in_edge.relation_id]]
        if node.entity is not None:
            own = [
                res.schema.types[x]
                for x in res.entity_types.type[res.type_ptr[node.entity] : res.type_ptr[node.entity + 1]].tolist()
            ]
            if t not in own:
                t = own[0] if own else t
        types.append(t if t is not None else node.type)
    nodes = tuple(PatternNode(x.text, ty, x.entity) for x, ty in zip(p.nodes, types))
    return Pattern(nodes, p.edges, p.source, p.score, p.meta)


# ----------------------------------------------------------------------------- ADJ


@dataclass
class Candidate:
    edge: int  # schema edge id
    flipped: bool  # pseudo head <-> schema tail
    distance: float


@dataclass
class Alignment:
    edges: tuple[Candidate, ...]
    distance: float


class _Vectors:
    """Type / relation vectors of pattern items (schema rows reused, other texts encoded)."""

    def __init__(self, res: SchemaResources, emb: KGEmbeddings, index: KGIndex, patterns, encoder, cache_dir):
        self.res, self.emb = res, emb
        self.rel_lookup = index.relation_lookup()
        todo = sorted(
            {
                x.type
                for pats in patterns
                for p in pats
                for x in p.nodes
                if x.type is not None and x.type not in res.type_lookup
            }
        )
        self.extra: dict[str, torch.Tensor] = {}
        self.memo: dict = {}
        if todo:
            if encoder is None:
                raise ValueError(f"pattern types {todo[:3]} are not schema types; pass the encoder")

            rows = embed_texts(todo, encoder, cache_dir, kind="pattern_types").float()
            self.extra = {t: rows[i] for i, t in enumerate(todo)}

    def type_vec(self, name: str | None) -> torch.Tensor | None:
        if name is None:
            return None
        i = self.res.type_lookup.get(name)
        return self.res.type_emb[i] if i is not None else self.extra[name]


def candidate_schema_edges(
    p: Pattern, res: SchemaResources, vectors: _Vectors, rel_vec, k_schema: int
) -> list[list[Candidate]]:
    """The ``k_schema`` nearest schema edges of every pseudo edge (either orientation)."""
    sg = res.schema
    num_t = len(sg.types)
    tdist = vectors.memo  # (type, entity) / relation -> distances, shared across patterns

    def type_d2(i: int) -> torch.Tensor:  # squared distance of node i's type to every schema type
        node = p.nodes[i]
        key = ("type", node.type, node.entity)
        if key not in tdist:
            v = vectors.type_vec(node.type)
            d = torch.zeros(num_t, dtype=torch.float32) if v is None else l2_to_rows(v, res.type_emb) ** 2
            if node.entity is not None:  # a linked entity keeps its own types only
                own = res.entity_types.type[res.type_ptr[node.entity] : res.type_ptr[node.entity + 1]]
                if own.numel():
                    mask = torch.ones(num_t, dtype=torch.bool)
                    mask[own] = False
                    d = d.masked_fill(mask, math.inf)
            tdist[key] = d
        return tdist[key]

    out = []
    for j, e in enumerate(p.edges):
        key = ("rel", e.relation, e.relation_id)
        if key not in tdist:
            rv = rel_vec(p, j)
            rd = (
                torch.zeros(int(sg.relation.max()) + 1 if len(sg) else 1)
                if rv is None
                else l2_to_rows(rv, vectors.emb.relation) ** 2
            )
            tdist[key] = rd[sg.relation] if len(sg) else torch.zeros(0)
        r_part = tdist[key]
        th, tt = type_d2(e.head), type_d2(e.tail)
        both = torch.cat([th[sg.head] + r_part + tt[sg.tail], tt[sg.head] + r_part + th[sg.tail]]).sqrt_()
        n = int(torch.isfinite(both).sum())
        cands = []
        if n:
            top = torch.topk(both, min(k_schema, n), largest=False)
            for d, pos in zip(top.values.tolist(), top.indices.tolist()):
                cands.append(Candidate(pos % len(sg), pos >= len(sg), float(d)))
        out.append(cands)
    return out


def _node_type(c: Candidate, sg: SchemaGraph, pseudo_is_head: bool) -> int:
    """Schema type the candidate gives to the pseudo edge's head (or tail) node."""
    head_side = pseudo_is_head != c.flipped
    return int(sg.head[c.edge]) if head_side else int(sg.tail[c.edge])


def distance_join(
    p: Pattern, cands: Sequence[Sequence[Candidate]], sg: SchemaGraph, delta: int, k_qg: int
) -> list[Alignment]:
    """Top-``k_qg`` assignments of one candidate per pseudo edge such that every pseudo node
    shared by two edges gets schema types at most ``delta`` hops apart (SAFE Algorithm 1)."""
    n = len(p.edges)
    ends = [(e.head, e.tail) for e in p.edges]
    found: list[Alignment] = []
    chosen: list[Candidate] = []  # the candidates of pseudo edges 0 .. i-1 while matching edge i

    def types_of(i: int, c: Candidate) -> dict[int, int]:
        h, t = ends[i]
        return {h: _node_type(c, sg, True), t: _node_type(c, sg, False)}

    def match(i: int, dist: float) -> None:
        if i == n:
            found.append(Alignment(tuple(chosen), dist))
            return
        for c in cands[i]:
            mine = types_of(i, c)
            ok = True
            for j in range(i):
                other = types_of(j, chosen[j])
                for node, ty in mine.items():
                    if node in other and int(sg.distance[ty, other[node]]) > delta:
                        ok = False
                        break
                if not ok:
                    break
            if ok:
                chosen.append(c)
                match(i + 1, dist + c.distance)
                chosen.pop()

    match(0, 0.0)
    found.sort(key=lambda a: a.distance)
    return found[:k_qg]


def instantiate(p: Pattern, a: Alignment, sg: SchemaGraph, relations: Sequence[str]) -> Pattern:
    """The aligned query graph as a pattern (KG relations, schema types, bridges for d > 0)."""
    nodes = list(p.nodes)
    first_type: dict[int, int] = {}
    edges: list[PatternEdge] = []
    for e, c in zip(p.edges, a.edges):
        ends = []
        for node, is_head in ((e.head, True), (e.tail, False)):
            ty = _node_type(c, sg, is_head)
            if node not in first_type:
                first_type[node] = ty
                x = nodes[node]
                nodes[node] = PatternNode(x.text, sg.types[ty], x.entity)
                ends.append(node)
                continue
            d = int(sg.distance[first_type[node], ty])
            if d == 0:
                ends.append(node)
                continue
            # split: a copy of the node with the new type, d unknown-relation hops away
            prev = node
            for step in range(d):
                last = step == d - 1
                nodes.append(PatternNode(type=sg.types[ty] if last else None))
                edges.append(PatternEdge(prev, len(nodes) - 1))
                prev = len(nodes) - 1
            ends.append(prev)
        r = int(sg.relation[c.edge])
        edges.append(PatternEdge(ends[0], ends[1], relations[r], r))
    return Pattern(
        tuple(nodes), tuple(edges), source=f"{p.source}+adj", score=p.score, meta={"join_distance": a.distance}
    )


# ----------------------------------------------------------------------------- matching


class SAFECosts:
    """SemDist cost tables of one aligned pattern on one question graph."""

    def __init__(
        self,
        index: KGIndex,
        emb: KGEmbeddings,
        res: SchemaResources,
        vectors: PatternVectors,
        tvec: _Vectors,
        cfg: SAFEConfig,
    ):
        self.num_relations = len(index.relations)
        self.emb, self.res, self.vectors, self.tvec, self.cfg = emb, res, vectors, tvec, cfg
        self._pairs: tuple[int, torch.Tensor, torch.Tensor] | None = None
        self._memo: dict = {}
        self._memo_q = -1

    def _local_pairs(self, q: int, g: QuestionGraph) -> tuple[torch.Tensor, torch.Tensor]:
        """(local entity, type) pairs of the question graph (cached for the current question)."""
        if self._pairs is None or self._pairs[0] != q:
            ptr = self.res.type_ptr
            ids = g.entity_ids
            counts = ptr[ids + 1] - ptr[ids]
            owner = torch.repeat_interleave(torch.arange(ids.numel()), counts)
            offs = torch.arange(int(counts.sum())) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
            types = self.res.entity_types.type[ptr[ids][owner] + offs]
            self._pairs = (q, owner, types)
        return self._pairs[1], self._pairs[2]

    def node_cost(self, q: int, g: QuestionGraph, p: Pattern, i: int) -> np.ndarray:
        x = p.nodes[i]
        n = g.num_entities
        if x.known:
            vec = self.vectors.node(p, i)
            if vec is None:
                out = np.full(n, math.inf)
                if x.entity is not None:
                    out[(g.entity_ids == x.entity).numpy()] = 0.0
                return out
            return nearest_costs(
                self.emb.entity[g.entity_ids], vec, self.emb.entity_has_text[g.entity_ids], self.cfg.k_ent
            )
        tv = self.tvec.type_vec(x.type)
        if tv is None:
            return np.zeros(n)
        tdist = l2_to_rows(tv, self.res.type_emb).double()
        keep = torch.topk(tdist, min(self.cfg.k_type, tdist.numel()), largest=False).indices
        sim = torch.full_like(tdist, math.inf)
        sim[keep] = tdist[keep]
        owner, types = self._local_pairs(q, g)
        cost = scatter(sim[types], owner, 0, dim_size=n, reduce="min")  # untyped entities: 0, set below
        worst = float(tdist[keep].max())
        untyped = torch.ones(n, dtype=torch.bool)
        untyped[owner] = False
        cost[untyped] = worst  # with hard_types only entities without any type escape the filter
        if not self.cfg.hard_types:
            cost[torch.isinf(cost)] = worst
        return cost.numpy()

    def __call__(self, q: int, g: QuestionGraph, p: Pattern):
        if self._memo_q != q:  # the aligned graphs of one question share most items
            self._memo, self._memo_q = {}, q
        nodes = []
        for i, x in enumerate(p.nodes):
            key = ("n", x.text, x.entity, x.type if not x.known else None)
            if key not in self._memo:
                self._memo[key] = self.node_cost(q, g, p, i)
            nodes.append(self._memo[key])
        rels = []
        for i, e in enumerate(p.edges):
            rkey = ("r", e.relation, e.relation_id)
            if rkey not in self._memo:
                self._memo[rkey] = relation_cost(
                    self.num_relations, g, self.vectors.relation(p, i), self.emb, self.cfg.k_rel
                )
            rels.append(self._memo[rkey])
        return nodes, rels


@dataclass
class AlignStats:
    patterns: int = 0
    aligned_graphs: int = 0
    fallback: int = 0  # patterns with no feasible join: matched unaligned
    bridges: int = 0
    seconds: list = field(default_factory=list)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["adj_ms_per_question"] = round(1000 * sum(self.seconds) / max(len(self.seconds), 1), 3)
        del d["seconds"]
        return d


def align_patterns(
    index: KGIndex,
    emb: KGEmbeddings,
    res: SchemaResources,
    patterns: Sequence[Sequence[Pattern]],
    cfg: SAFEConfig,
    vectors: PatternVectors,
    tvec: _Vectors,
) -> tuple[list[list[Pattern]], list[list[float]], AlignStats]:
    """ADJ for every pattern of every question: aligned patterns and their join distances."""
    stats = AlignStats()
    out, offsets = [], []
    for pats in patterns:
        t0 = time.perf_counter()
        aligned, dists = [], []
        for p in pats:
            stats.patterns += 1
            cands = candidate_schema_edges(p, res, tvec, vectors.relation, cfg.k_schema)
            joins = distance_join(p, cands, res.schema, cfg.delta, cfg.k_qg) if all(cands) else []
            if not joins:
                stats.fallback += 1
                aligned.append(p)
                dists.append(0.0)
                continue
            for a in joins:
                q = instantiate(p, a, res.schema, index.relations)
                stats.bridges += len(q.edges) - len(p.edges)
                aligned.append(q)
                dists.append(a.distance)
        stats.aligned_graphs += len(aligned)
        out.append(aligned)
        offsets.append(dists)
        stats.seconds.append(time.perf_counter() - t0)
    return out, offsets, stats


def safe_retrieve(
    index: KGIndex,
    split_name: str | SplitGraphs,
    emb: KGEmbeddings,
    patterns: Sequence[Sequence[Pattern]],
    cfg: SAFEConfig | Mapping | None = None,
    encoder=None,
    cache_dir: str | Path | None = None,
    resources: SchemaResources | None = None,
    schema_splits: Sequence[str] | None = None,
    type_chains: bool = True,
) -> tuple[PatternRun, AlignStats]:
    """SAFE over a split. ``patterns[q]``: typed pseudo query graphs (chain patterns are typed
    with `type_path_pattern` when ``type_chains``); the schema is built over
    ``schema_splits`` (default: every split of the index) unless ``resources`` is given."""
    cfg = SAFEConfig.from_mapping(cfg)
    if resources is None:
        if encoder is None:
            raise ValueError("safe_retrieve needs the encoder (type names are embedded) or prebuilt resources")
        resources = SchemaResources.build(index, list(schema_splits or index.splits), encoder, cache_dir, cfg)
    if type_chains:
        patterns = [
            [type_path_pattern(p, resources, index.relations) if p.source in ("gsr", "gold") else p for p in pats]
            for pats in patterns
        ]
    vectors = PatternVectors(index, emb, patterns, encoder, cache_dir)
    tvec = _Vectors(resources, emb, index, patterns, encoder, cache_dir)
    aligned, offsets, astats = align_patterns(index, emb, resources, patterns, cfg, vectors, tvec)
    vectors = PatternVectors(index, emb, aligned, encoder, cache_dir)
    tvec = _Vectors(resources, emb, index, aligned, encoder, cache_dir)
    costs = SAFECosts(index, emb, resources, vectors, tvec, cfg)
    graphs = index[split_name] if isinstance(split_name, str) else split_name  # e.g. perturbed graphs
    run = retrieve_split(
        graphs, aligned, costs, cfg.k, cfg.prune, cfg.max_partial, extra_distance=lambda q, j: offsets[q][j]
    )
    run.seconds = [a + b for a, b in zip(run.seconds, astats.seconds)]
    return run, astats
