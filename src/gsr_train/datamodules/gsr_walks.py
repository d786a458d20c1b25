"""Multi-hop GSR training signal without labels: random walks over the KG, told as questions.

Retrieval chains in WebQSP are mostly one or two relations long; a model trained on them has
rarely produced a longer chain, and a relation that no chain uses has only its one-relation
indexing examples. Walks of ``min_hops..max_hops`` relations, sampled from the training graphs,
give composed examples such as ``what is the languages spoken of the country of jamaica ->
location.location.containedby location.country.languages_spoken`` for any relation of the KG.

Walks start at the training questions' topic entities (a RoG dataset) or, for a KG shared with
the evaluation questions (``webqsp_paths`` over ``webqsp_mini`` graphs), at any named entity that
is not an evaluation question's topic entity. They follow stored edge directions over the union of
the given splits' graphs (duplicate triples counted once), never repeat a relation back to back,
and skip Freebase meta relations; all walks advance together, one vectorised step per hop.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gsr_train.datamodules.gsr_chains import META_PREFIXES, Chain
from gsr_train.features.relation_tokens import relation_words
from gsr_train.io import stable_hash
from gsr_train.kg.index import KGIndex

log = logging.getLogger(__name__)

STARTS = ("topics", "named")


@dataclass(frozen=True)
class Walk:
    subject: str
    chain: Chain


@dataclass
class WalkExample:
    text: str
    chain: Chain


def union_graph(index: KGIndex, splits: Sequence[str], drop_prefixes: Sequence[str] = META_PREFIXES):
    """The walks' graph: distinct triples of ``splits`` without meta relations or self loops, as CSR."""
    return _union_graph(index, splits, _relation_keep(index, drop_prefixes))


def _relation_keep(index: KGIndex, drop_prefixes: Sequence[str]) -> torch.Tensor:
    prefixes = tuple(drop_prefixes or ())
    return torch.tensor([not (prefixes and r.startswith(prefixes)) for r in index.relations], dtype=torch.bool)


def _union_graph(
    index: KGIndex, splits: Sequence[str], keep_rel: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CSR over global entity ids of the distinct (head, relation, tail) triples of ``splits``:
    (offsets ``[E + 1]`` int64, relation ``[M]``, tail ``[M]``), edges sorted by head."""
    num_e, num_r = len(index.entities), len(index.relations)
    if num_e * num_r * num_e >= 2**63:  # one int64 key per triple (Freebase-sized KGs fit many times over)
        raise ValueError(f"random walks: {num_e:,} entities x {num_r:,} relations do not fit one int64 triple key")
    parts = []
    for s in splits:
        if s not in index.splits:
            continue
        for g in index[s].global_edge_chunks():
            g = g[keep_rel[g[:, 1]] & (g[:, 0] != g[:, 2])]
            parts.append(torch.unique((g[:, 0] * num_r + g[:, 1]) * num_e + g[:, 2]))
    keys = torch.unique(torch.cat(parts)) if parts else torch.zeros(0, dtype=torch.long)  # sorted: by head first
    head = keys // (num_r * num_e)
    rel = (keys // num_e) % num_r
    tail = keys % num_e
    offsets = torch.zeros(num_e + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(torch.bincount(head, minlength=num_e), 0)
    return offsets, rel, tail


def _start_entities(
    index: KGIndex, splits: Sequence[str], starts: str, exclude: Iterable[str], out_degree: torch.Tensor
) -> torch.Tensor:
    if starts not in STARTS:
        raise ValueError(f"gsr.walks.starts must be one of {STARTS}, got {starts!r}")
    ok = index.entity_has_text().clone() & (out_degree > 0)
    if starts == "topics":
        topic = torch.zeros(len(index.entities), dtype=torch.bool)
        for s in splits:
            if s in index.splits:
                g = index[s]
                topic[g.entity_ids[g.topic_mask].long()] = True
        ok &= topic
    lookup = index.entity_lookup()
    ban = [lookup[e] for e in exclude if e in lookup]
    if ban:
        ok[torch.tensor(ban, dtype=torch.long)] = False
    return torch.nonzero(ok).flatten()


def sample_walks(
    index: KGIndex | None,
    splits: Sequence[str] = ("train",),
    count: int = 1000,
    min_hops: int = 2,
    max_hops: int = 4,
    starts: str = "topics",
    exclude: Iterable[str] = (),
    drop_prefixes: Sequence[str] = META_PREFIXES,
    seed: int = 0,
    graph=None,
) -> list[Walk]:
    """Up to ``count`` distinct (subject, chain) walks of ``min_hops..max_hops`` relations.

    Each walk draws its length uniformly, then takes a uniformly random outgoing edge per hop; a
    walk that reaches a node without a usable edge ends there and is kept if it is long enough.
    ``count`` walks are drawn (twice over when duplicates are dropped), so fewer may come back on
    a small graph. ``graph``: the union graph of ``union_graph(index, splits, drop_prefixes)`` when
    the caller has it already.
    """
    if not 1 <= int(min_hops) <= int(max_hops):
        raise ValueError(f"gsr.walks needs 1 <= min_hops <= max_hops, got {min_hops}..{max_hops}")
    if index is None or count <= 0:
        return []
    offsets, rel, tail = graph if graph is not None else union_graph(index, splits, drop_prefixes)
    degree = offsets[1:] - offsets[:-1]
    start_ids = _start_entities(index, splits, starts, exclude, degree)
    if len(start_ids) == 0 or len(rel) == 0:
        log.warning("random walks: no start entity with an outgoing edge in %s", list(splits))
        return []
    gen = torch.Generator().manual_seed(int(stable_hash("gsr-walks", seed), 16) % (2**63))
    n = 2 * int(count)
    start = start_ids[torch.randint(len(start_ids), (n,), generator=gen)]
    cur = start.clone()
    length = torch.randint(int(min_hops), int(max_hops) + 1, (n,), generator=gen)
    hops = torch.full((n, int(max_hops)), -1, dtype=torch.long)
    alive = torch.ones(n, dtype=torch.bool)
    done = torch.zeros(n, dtype=torch.long)
    prev = torch.full((n,), -1, dtype=torch.long)
    for h in range(int(max_hops)):
        alive &= (length > h) & (degree[cur] > 0)
        if not alive.any():
            break
        pick = offsets[cur] + (torch.rand(n, generator=gen) * degree[cur]).long()
        pick = torch.minimum(pick, offsets[cur + 1] - 1).clamp_min(0)
        r = rel[pick]
        alive &= r != prev  # no relation twice in a row (hub loops, CVT round trips)
        hops[alive, h] = r[alive]
        done += alive.long()
        cur = torch.where(alive, tail[pick], cur)
        prev = torch.where(alive, r, prev)
    keep = done >= int(min_hops)
    rows = torch.cat([start[keep, None], hops[keep]], dim=1)  # padded with -1 after the last hop
    if len(rows) == 0:
        return []
    uniq, inverse = torch.unique(rows, dim=0, return_inverse=True)
    first = torch.full((len(uniq),), len(rows), dtype=torch.long).scatter_reduce_(
        0, inverse, torch.arange(len(rows)), reduce="amin"
    )  # distinct walks in the order drawn
    order = torch.argsort(first)[: int(count)]
    uniq = uniq[order]
    subjects = index.entities.take(uniq[:, 0].tolist())
    relations = list(index.relations)
    return [Walk(s, tuple(relations[r] for r in row if r >= 0)) for s, row in zip(subjects, uniq[:, 1:].tolist())]


_COMPOSED = (  # templates that read well with a nested subject
    "what is the {p} of [SUBJECT]",
    "what {p} does [SUBJECT] have",
    "tell me the {p} of [SUBJECT]",
    "who or what is the {p} of [SUBJECT]",
    "name the {p} of [SUBJECT]",
    "[SUBJECT] {p}",
)


def _noun(relation: str) -> str:
    """The property words of a relation (``spouse_s`` -> ``spouse``)."""
    prop = relation_words(relation.split(".")[-1])
    return prop[:-2] if prop.endswith(" s") else prop


def walk_question(walk: Walk, seed: int = 0) -> str:
    """A composed pseudo question: the last relation's template, its subject the earlier hops
    read outwards (``the country of jamaica``)."""
    subject = walk.subject
    for r in walk.chain[:-1]:
        subject = f"the {_noun(r)} of {subject}"
    templates = [t.format(p=_noun(walk.chain[-1])) for t in _COMPOSED]
    rng = random.Random(stable_hash("gsr-walk-question", seed, walk.subject, *walk.chain))
    return " ".join(rng.choice(templates).replace("[SUBJECT]", subject).lower().split())


def walk_examples(walks: Sequence[Walk], seed: int = 0) -> list[WalkExample]:
    return [WalkExample(walk_question(w, seed), w.chain) for w in walks]


def walk_summary(walks: Sequence[Walk]) -> dict:
    lengths = np.bincount([len(w.chain) for w in walks]) if walks else np.zeros(0, dtype=int)
    return {
        "walks": len(walks),
        "walk_relations": len({r for w in walks for r in w.chain}),
        "walks_by_hops": {str(h): int(c) for h, c in enumerate(lengths) if c},
    }
