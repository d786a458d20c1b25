"""SAFE's schema graph: (type, relation, type) edges counted from the KG (papers/safe.txt C.2).

Entity types. Type triples are used where present (``type_relations``, default
``type.object.type``: the tail's name is a type of the head). The RoG-format graphs
(webqsp_mini, RoG-WebQSP/CWQ, the embedded benchmark) have almost none, so types are also
inferred from Freebase relation ids ``domain.type.property``:

1. every head of ``d.t.p`` has type ``d.t`` (the property's domain). Tails reached
   through an inverse relation are heads of that inverse and so get their type from it;
2. every relation gets an expected tail type (range): the most frequent step-1 type among
   its tails, when at least ``min_range_share`` of its typed tails carry it;
3. every tail also takes the range of its relation (inferred types are incomplete: an
   entity only heads a few relations in a small graph, so the ranges add what it is
   *used as*, e.g. a vice president reached by ``us_president.vice_president``).

Entities left without a type (literals of relations with no clear range) are "untyped":
they join no schema edge. Relations of bookkeeping domains (``GENERIC_DOMAINS``: common,
freebase, type, kg, user, base) give no type, since every entity carries them, and form
no schema edge (they would join every type to every other and flatten the distances).

Schema edges. Every triple adds 1 to ``cnt(td, r, tr)`` for every head type ``td`` and tail
type ``tr`` of its entities; ``support = cnt`` and ``confidence = cnt / support(td)`` with
``support(td)`` = number of distinct entities of type ``td`` (the paper's formulas); edges
below ``min_support`` or ``min_confidence`` are dropped.

Distances. ``distance[a, b]`` is the hop distance between types in the schema graph with
edge direction ignored (both retrievers ignore direction), computed by breadth-first
boolean matrix products up to ``max_distance`` (larger = unreachable, stored as
``max_distance + 1``). SAFE only ever asks "within delta?" for small delta, so the cap keeps
it cheap on any number of types.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

GENERIC_DOMAINS = frozenset({"common", "freebase", "type", "kg", "user", "base", "dataworld"})
_FB_RELATION = re.compile(r"^([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\.[A-Za-z0-9_.-]+$")


def relation_domain(relation: str) -> str | None:
    """``people.person.spouse_s`` -> ``people.person``; None for generic / non-Freebase ids."""
    m = _FB_RELATION.match(relation)
    if m is None or m.group(1) in GENERIC_DOMAINS:
        return None
    return f"{m.group(1)}.{m.group(2)}"


@dataclass
class EntityTypes:
    """Sparse entity -> type pairs (``entity[j]`` has type ``types[type[j]]``), sorted by entity."""

    types: list[str]
    entity: torch.Tensor  # [P] global entity ids
    type: torch.Tensor  # [P] type ids
    relation_range: dict[int, int]  # relation id -> inferred tail type id
    num_entities: int

    def ptr(self) -> torch.Tensor:
        """CSR offsets over entities (``[num_entities + 1]``)."""
        counts = torch.bincount(self.entity, minlength=self.num_entities)
        return torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])

    def of(self, entity: int) -> list[str]:
        return [self.types[t] for t in self.type[self.entity == entity].tolist()]


def _unique_pairs(a: torch.Tensor, b: torch.Tensor, nb: int) -> tuple[torch.Tensor, torch.Tensor]:
    key = torch.unique(a.long() * nb + b.long())
    return key // nb, key % nb


def infer_entity_types(
    entities: Sequence[str],
    relations: Sequence[str],
    triples: torch.Tensor,
    type_relations: Sequence[str] = ("type.object.type",),
    min_range_share: float = 0.5,
) -> EntityTypes:
    """Types of every entity from ``triples`` (``[M, 3]`` global h, r, t); see the module doc."""
    triples = triples.long()
    h, r, t = triples[:, 0], triples[:, 1], triples[:, 2]
    names: dict[str, int] = {}
    rel_type = torch.full((len(relations),), -1, dtype=torch.long)
    for i, name in enumerate(relations):
        d = relation_domain(name)
        if d is not None:
            rel_type[i] = names.setdefault(d, len(names))
    type_rel = torch.zeros(len(relations), dtype=torch.bool)
    for i, name in enumerate(relations):
        type_rel[i] = name in set(type_relations)
    # type triples: the tail's name is the type
    is_type = type_rel[r]
    tt_heads, tt_tails = h[is_type], t[is_type]
    tail_names = sorted({entities[x] for x in tt_tails.tolist()})
    for name in tail_names:
        names.setdefault(name, len(names))
    tt_type = torch.tensor([names[entities[x]] for x in tt_tails.tolist()], dtype=torch.long)
    # 1. heads get the domain type of their relation
    typed = (rel_type[r] >= 0) & ~is_type
    num_t = max(len(names), 1)
    pe, pt = _unique_pairs(torch.cat([h[typed], tt_heads]), torch.cat([rel_type[r][typed], tt_type]), num_t)
    # 2. relation ranges: most frequent step-1 type among each relation's tails
    num_e = len(entities)
    has_type = torch.zeros(num_e, dtype=torch.bool)
    has_type[pe] = True
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(pe, minlength=num_e).cumsum(0)])
    sel = ~is_type & has_type[t]
    rr, tt = r[sel], t[sel]
    counts = ptr[tt + 1] - ptr[tt]
    owner = torch.repeat_interleave(torch.arange(rr.numel()), counts)
    offs = torch.arange(int(counts.sum())) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
    pair_type = pt[ptr[tt][owner] + offs]
    rel_range: dict[int, int] = {}
    if pair_type.numel():
        key, cnt = torch.unique(rr[owner] * num_t + pair_type, return_counts=True)
        krel, ktype = key // num_t, key % num_t
        tails_per_rel = torch.bincount(rr, minlength=len(relations))
        order = torch.argsort(cnt, descending=True, stable=True)
        for j in order.tolist():
            rel = int(krel[j])
            if rel not in rel_range and float(cnt[j]) >= min_range_share * float(tails_per_rel[rel]):
                rel_range[rel] = int(ktype[j])
    # 3. tails take the ranges of their relations
    rng = torch.full((len(relations),), -1, dtype=torch.long)
    for rel, ty in rel_range.items():
        rng[rel] = ty
    fill = ~is_type & (rng[r] >= 0)
    ent = torch.cat([pe, t[fill]])
    typ = torch.cat([pt, rng[r][fill]])
    ent, typ = _unique_pairs(ent, typ, num_t)
    types: list[str] = [""] * len(names)  # every slot is filled: the ids are 0 .. len(names) - 1
    for name, i in names.items():
        types[i] = name
    return EntityTypes(types, ent, typ, rel_range, num_e)


@dataclass
class SchemaGraph:
    types: list[str]
    head: torch.Tensor  # [S] type id
    relation: torch.Tensor  # [S] global relation id
    tail: torch.Tensor  # [S] type id
    support: torch.Tensor  # [S] triples backing the edge
    confidence: torch.Tensor  # [S] support / type_support[head]
    type_support: torch.Tensor  # [T] distinct entities per type
    distance: torch.Tensor  # [T, T] int16 hop distance (undirected), max_distance + 1 = farther
    max_distance: int

    def __len__(self) -> int:
        return int(self.head.numel())

    def edge_texts(self, relations: Sequence[str]) -> list[str]:
        """``"c r c'"`` composite text of every edge (SAFE embeds these)."""
        return [
            f"{self.types[a]} {relations[r]} {self.types[b]}"
            for a, r, b in zip(self.head.tolist(), self.relation.tolist(), self.tail.tolist())
        ]


def type_distances(num_types: int, a: torch.Tensor, b: torch.Tensor, max_distance: int) -> torch.Tensor:
    """Undirected hop distances between types, BFS by boolean matrix products, capped."""
    far = max_distance + 1
    dist = torch.full((num_types, num_types), far, dtype=torch.int16)
    if num_types == 0:
        return dist
    adj = torch.zeros(num_types, num_types, dtype=torch.float32)
    adj[a, b] = 1.0
    adj[b, a] = 1.0
    reach = torch.eye(num_types, dtype=torch.float32)
    dist[reach.bool()] = 0
    for d in range(1, max_distance + 1):
        reach = ((reach @ adj) + reach).clamp_(max=1.0)
        new = reach.bool() & (dist == far)
        if not bool(new.any()):
            break
        dist[new] = d
    return dist


def build_schema(
    entity_types: EntityTypes,
    triples: torch.Tensor,
    min_support: int = 1,
    min_confidence: float = 0.0,
    max_distance: int = 3,
    relations: Sequence[str] | None = None,
) -> SchemaGraph:
    """Count ``(head type, relation, tail type)`` over ``triples`` (``[M, 3]``) and prune.

    ``relations`` (the relation names) drops bookkeeping-domain relations (see module doc).
    """
    et = entity_types
    num_t = max(len(et.types), 1)
    ptr = et.ptr()
    triples = triples.long()
    if triples.numel():  # a KG is a set of triples
        triples = _unique_triples(
            triples, max(et.num_entities, int(triples[:, [0, 2]].max()) + 1), int(triples[:, 1].max()) + 1
        )
    if relations is not None and triples.numel():
        generic = torch.tensor(
            [relation_domain(x) is None and _FB_RELATION.match(x) is not None for x in relations], dtype=torch.bool
        )
        triples = triples[~generic[triples[:, 1]]]
    h, r, t = triples[:, 0], triples[:, 1], triples[:, 2]
    nh, nt = ptr[h + 1] - ptr[h], ptr[t + 1] - ptr[t]
    per = nh * nt  # head-type x tail-type combinations of every triple
    owner = torch.repeat_interleave(torch.arange(h.numel()), per)
    local = torch.arange(int(per.sum())) - torch.repeat_interleave(per.cumsum(0) - per, per)
    hi = ptr[h][owner] + local // nt[owner]
    ti = ptr[t][owner] + local % nt[owner]
    td, tr, rel = et.type[hi], et.type[ti], r[owner]
    num_r = int(r.max()) + 1 if r.numel() else 1
    key, cnt = torch.unique((td * num_r + rel) * num_t + tr, return_counts=True)
    e_head, e_rel, e_tail = key // (num_r * num_t), (key // num_t) % num_r, key % num_t
    type_support = torch.bincount(et.type, minlength=len(et.types))
    conf = cnt.double() / type_support[e_head].clamp(min=1).double()
    keep = (cnt >= min_support) & (conf >= min_confidence)
    e_head, e_rel, e_tail, cnt, conf = e_head[keep], e_rel[keep], e_tail[keep], cnt[keep], conf[keep]
    dist = type_distances(len(et.types), e_head, e_tail, max_distance)
    return SchemaGraph(list(et.types), e_head, e_rel, e_tail, cnt, conf, type_support, dist, max_distance)


def split_triples(index, splits: Sequence[str]) -> torch.Tensor:
    """Distinct global triples of the given splits of a KG index (the KG the schema summarises)."""
    num_e, num_r = len(index.entities), len(index.relations)
    # distinct triples run by run, then across runs: never all edges of all splits at once
    parts = [_unique_triples(g, num_e, num_r) for s in splits for g in index[s].global_edge_chunks()]
    if not parts:
        return torch.zeros(0, 3, dtype=torch.long)
    return _unique_triples(torch.cat(parts), num_e, num_r)


def _unique_triples(triples: torch.Tensor, num_e: int, num_r: int) -> torch.Tensor:
    """Row-unique triples via one packed int64 key (``unique(dim=0)`` is much slower)."""
    if num_e * num_e * max(num_r, 1) >= 1 << 62:  # pragma: no cover - astronomically large vocabularies
        return torch.unique(triples, dim=0)
    key = torch.unique((triples[:, 0] * num_r + triples[:, 1]) * num_e + triples[:, 2])
    return torch.stack([key // (num_r * num_e), (key // num_e) % num_r, key % num_e], dim=1)
