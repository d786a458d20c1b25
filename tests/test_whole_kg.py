"""Retrieval on the whole-KG store: chains walked on it, the region a pattern needs, the exact pattern
search over it (checked against a brute force over the whole KG), and the vector index that finds the
nearest of all its entities (exact, approximate, cached and rebuilt when damaged)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from gsr_train.kg.store import open_store
from gsr_train.kg.store_build import import_kg
from gsr_train.kg.store_walk import StoreWalker
from gsr_train.patterns.pattern import Pattern, PatternEdge, PatternNode
from gsr_train.patterns.search import LocalGraph, brute_force_matches
from gsr_train.patterns.store_search import StoreCosts, StorePatternSearch, eccentricity
from gsr_train.retrievers.gsr_kg import gsr_store_retrieve
from gsr_train.text.vector_index import VectorIndex, VectorIndexOptions, exact_l2


def random_kg(path: Path, entities: int = 40, relations: int = 4, triples: int = 160, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    h = rng.integers(0, entities, triples)
    t = rng.integers(0, entities, triples)
    r = rng.integers(0, relations, triples)
    path.write_text("".join(f"e{a}\tr{c}\te{b}\n" for a, b, c in zip(h, t, r)))
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("whole_kg")
    import_kg([random_kg(root / "kg.tsv")], root / "store")
    return open_store(root / "store")


def ref_chain(store, topics, chain):
    """Frontiers hop by hop (both ways), then the backward sweep: the edges on complete walks."""
    H, R, T = (np.asarray(a) for a in (store.heads, store.rels, store.tails))
    frontier, steps = set(int(x) for x in topics), []
    for rel in chain:
        step = [
            (e, u, v) for e in range(H.size) if R[e] == rel for u, v in ((H[e], T[e]), (T[e], H[e])) if u in frontier
        ]
        steps.append(step)
        frontier = {v for _, _, v in step}
    alive, edges = frontier, []
    for step in reversed(steps):
        kept = [(e, u) for e, u, v in step if v in alive]
        edges.append({e for e, _ in kept})
        alive = {u for _, u in kept}
    return frontier, set().union(*edges) if frontier else set()


def test_chains_walked_on_the_store_match_a_reference(store):
    walker = StoreWalker(store)
    rng = np.random.default_rng(1)
    valid = 0
    for _ in range(60):
        topics = rng.integers(0, store.num_entities, rng.integers(1, 3))
        chain = tuple(int(x) for x in rng.integers(0, len(store.relations), rng.integers(1, 4)))
        walk = walker.chain(topics, chain)
        ends, edges = ref_chain(store, topics, chain)
        assert set(walk.ends.tolist()) == ends and set(walk.edges.tolist()) == edges
        assert walk.valid == bool(ends) and not walk.truncated
        valid += walk.valid
    assert 10 < valid < 60  # both kinds were checked


def test_a_walk_past_its_edge_budget_is_marked_truncated(store):
    hub = int(np.argmax(store.degree(np.arange(store.num_entities))))
    rel = int(np.asarray(store.rels)[np.asarray(store.out_edge)[store.out_ptr[hub]]])
    walk = StoreWalker(store, max_edges=1).chain(np.array([hub, (hub + 1) % store.num_entities]), (rel, rel, rel))
    assert walk.truncated


def ref_region(store, seeds, hops, rel_ok):
    H, R, T = (np.asarray(a) for a in (store.heads, store.rels, store.tails))
    dist = {int(s): 0 for s in seeds}
    for hop in range(hops):
        for e in range(H.size):
            if rel_ok[R[e]]:
                for u, v in ((H[e], T[e]), (T[e], H[e])):
                    if dist.get(int(u)) == hop and int(v) not in dist:
                        dist[int(v)] = hop + 1
    return {e for e in range(H.size) if rel_ok[R[e]] and int(H[e]) in dist and int(T[e]) in dist}


def test_the_region_is_every_allowed_edge_within_the_hops(store):
    walker = StoreWalker(store)
    rng = np.random.default_rng(2)
    for hops in (0, 1, 2, 3):
        seeds = rng.integers(0, store.num_entities, 3)
        rel_ok = rng.integers(0, 2, len(store.relations)).astype(np.uint8)
        edges, cut = walker.region(seeds, hops, rel_ok)
        assert set(edges.tolist()) == ref_region(store, seeds, hops, rel_ok) and not cut
        assert edges.size == np.unique(edges).size
    with pytest.raises(ValueError, match="rel_ok has shape"):
        walker.region(seeds, 1, np.ones(99, dtype=np.uint8))


PATTERNS = {
    "path": [(0, 1), (1, 2)],
    "star": [(0, 1), (0, 2), (0, 3)],
    "triangle": [(0, 1), (1, 2), (2, 0)],
    "long": [(0, 1), (1, 2), (2, 3)],
}


def random_costs(store, edges, seed):
    """Candidates for node 0 (few) and maybe one more node; relation costs with some unknown edges."""
    rng = np.random.default_rng(seed)
    n_nodes = 1 + max(max(e) for e in edges)
    nodes = [None] * n_nodes
    for p in {0, int(rng.integers(1, n_nodes))}:
        ids = np.unique(rng.integers(0, store.num_entities, 4 if p == 0 else 12))
        nodes[p] = (ids, np.round(rng.random(ids.size), 1))  # rounded: ties on purpose
    relations = []
    for _ in edges:
        cost = np.round(rng.random(len(store.relations)), 1)
        cost[rng.random(cost.size) < 0.3] = np.inf
        relations.append(cost if rng.random() < 0.8 else np.zeros(cost.size))
    return StoreCosts(nodes, relations)


def whole_kg_brute_force(store, edges, costs, k):
    s = store
    graph = LocalGraph.from_edges(
        np.stack([np.asarray(s.heads), np.asarray(s.tails)]).astype(np.int64), np.asarray(s.rels), s.num_entities
    )
    node_cost = []
    for c in costs.nodes:
        full = np.zeros(s.num_entities) if c is None else np.full(s.num_entities, np.inf)
        if c is not None:
            full[c[0]] = c[1]
        node_cost.append(full)
    return brute_force_matches(graph, edges, node_cost, costs.relations, k)


@pytest.mark.parametrize("shape", sorted(PATTERNS))
def test_the_store_search_finds_the_whole_kgs_top_k(tmp_path, shape):
    import_kg([random_kg(tmp_path / "kg.tsv", entities=14, relations=3, triples=36, seed=7)], tmp_path / "s")
    store = open_store(tmp_path / "s")
    edges = PATTERNS[shape]
    n_nodes = 1 + max(max(e) for e in edges)
    pattern = Pattern(tuple(PatternNode() for _ in range(n_nodes)), tuple(PatternEdge(h, t) for h, t in edges))
    checked = 0
    for seed in range(8):
        costs = random_costs(store, edges, seed)
        run = StorePatternSearch(store, lambda p, c=costs: c, k=5).run([[pattern]])
        got = [(round(s.distance, 9), frozenset(s.edges)) for s in run.subgraphs[0]]
        want = [(round(m.distance, 9), frozenset(m.edges)) for m in whole_kg_brute_force(store, edges, costs, 5)]
        assert got == want, (shape, seed)
        checked += bool(want)
    assert checked >= 3


def test_a_pattern_without_a_known_node_is_counted_not_searched(store):
    pattern = Pattern((PatternNode(), PatternNode()), (PatternEdge(0, 1),))
    costs = StoreCosts([None, None], [np.zeros(len(store.relations))])
    run = StorePatternSearch(store, lambda p: costs, k=3).run([[pattern], []])
    assert run.no_anchor == 1 and run.no_pattern == 1 and run.subgraphs == [[], []]
    assert (
        eccentricity(
            Pattern(tuple(PatternNode() for _ in range(4)), tuple(PatternEdge(*e) for e in PATTERNS["long"])), 1
        )
        == 2
    )


def test_gsr_chains_on_the_store_score_each_edge_by_its_best_chain(store):
    rels = store.relations
    topics = [np.array([0]), np.array([1, 2])]
    beams = [
        [([rels[0]], 0.9), (["no.such.relation"], 0.8), ([rels[1], rels[2]], 0.5), (None, 0.4)],
        [([rels[3]], 0.7)],
    ]
    run = gsr_store_retrieve(store, topics, beams, top_n=3)
    walker = StoreWalker(store)
    for q, (per_q, t) in enumerate(zip(beams, topics)):
        want: dict[int, float] = {}
        for chain, score in per_q:
            if chain is None or "no.such.relation" in chain:
                continue
            for e in walker.chain(t, tuple(rels.get(r) for r in chain)).edges.tolist():
                want[e] = max(want.get(e, -1.0), score)
        assert dict(zip(run.edges[q].tolist(), run.scores[q].tolist())) == want
        assert list(run.scores[q]) == sorted(run.scores[q], reverse=True)
    assert run.total_top == 4 and run.valid_top <= 3
    with pytest.raises(ValueError, match="topic lists"):
        gsr_store_retrieve(store, topics[:1], beams)


# ------------------------------------------------------------------ the vector index


def clustered(n: int, d: int = 24, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(4, n // 50), d))
    x = centres[rng.integers(0, centres.shape[0], n)] + 0.3 * rng.standard_normal((n, d))
    x[5] = x[9]  # a duplicate: a tie the order must break by row
    return torch.from_numpy(x.astype(np.float32))


def brute_nearest(table, rows, query, k):
    d = exact_l2(query[None], table[torch.from_numpy(rows)])[0].double().numpy()
    order = np.lexsort((rows, d))[:k]
    return rows[order], d[order]


def test_the_exact_index_gives_the_nearest_rows_with_their_exact_distances(tmp_path):
    table = clustered(600)
    rows = np.setdiff1d(np.arange(600), np.arange(0, 600, 7))  # some rows not indexed (mediators)
    index = VectorIndex(table, rows, VectorIndexOptions(), tmp_path)
    assert index.kind == "exact"
    queries = torch.cat([table[[9, 7, 100]], torch.zeros(1, table.shape[1])])
    ids, dist = index.search(queries, 6)
    for q in range(queries.shape[0]):
        want_ids, want_d = brute_nearest(table, rows, queries[q], 6)
        assert ids[q].tolist() == want_ids.tolist() and np.array_equal(dist[q], want_d)
    assert ids[0][:2].tolist() == [5, 9] and dist[0][0] == 0.0  # the duplicate, tie by row
    assert 7 not in ids[1]  # not indexed
    big = index.search(queries[:1], 1000)
    assert (big[0][0] >= 0).sum() == rows.size and math.isinf(big[1][0][-1])


def test_the_approximate_index_finds_nearly_all_and_is_cached(tmp_path):
    table = clustered(4000, seed=3)
    opts = VectorIndexOptions(exact_below=1000)
    index = VectorIndex(table, None, opts, tmp_path)
    assert index.kind.startswith("ivf") and index.nlist == int(4 * math.sqrt(4000))
    queries = table[:50] + 0.01
    ids, dist = index.search(queries, 10)
    recall = np.mean(
        [len(set(ids[q]) & set(brute_nearest(table, np.arange(4000), queries[q], 10)[0])) / 10 for q in range(50)]
    )
    assert recall >= 0.95
    assert np.array_equal(dist[3], exact_l2(queries[3:4], table[torch.from_numpy(ids[3])])[0].double().numpy())
    (cached,) = tmp_path.glob("faiss-*.index")
    again = VectorIndex(table, None, opts, tmp_path)
    assert np.array_equal(again.search(queries, 10)[0], ids)
    del again, index  # their memory maps of the file (truncating a mapped file faults its readers)
    cached.write_bytes(cached.read_bytes()[:100])  # truncated: rebuilt, not a crash
    third = VectorIndex(table, None, opts, tmp_path)
    assert np.array_equal(third.search(queries, 10)[0], ids) and cached.stat().st_size > 100
    with pytest.raises(ValueError, match="nprobe"):
        VectorIndexOptions(nprobe=0)


def test_an_empty_index_finds_nothing(tmp_path):
    index = VectorIndex(clustered(20), np.zeros(0, dtype=np.int64))
    ids, dist = index.search(torch.zeros(2, 24), 3)
    assert (ids == -1).all() and np.isinf(dist).all()


# ------------------------------------------------------------------ webqsp_mini, its union as the store


@pytest.fixture(scope="module")
def mini_kg(tmp_path_factory, user_cache):
    from .test_own_kg import union_kg

    root = tmp_path_factory.mktemp("whole_mini")
    import_kg([union_kg(root / "my_kg.tsv")], root / "my_kg_store")
    return root


def test_gold_chains_on_the_whole_kg_retrieve_all_they_retrieve_per_question(mini_kg, webqsp_mini, user_cache):
    """The store holds every question graph, so a chain's walks in a question graph are walks in the
    store: per question, the triples GSR's chains retrieve from its graph are among those they
    retrieve from the whole KG (and the whole KG answers at least as often)."""
    from gsr_train.kg.index import get_index
    from gsr_train.kg.paths import get_supervision
    from gsr_train.retrievers.gsr_chains import GSRChains

    index = get_index(webqsp_mini, splits=["test"], cache_dir=user_cache)
    split = index["test"]
    chains = get_supervision(index, "test", user_cache).chains_filtered
    beams = [[(tuple(c), 1.0 - 0.1 * i) for i, c in enumerate(per_q)] for per_q in chains]
    scores, _ = GSRChains(beams, top_n=3).score(split)
    store = open_store(mini_kg / "my_kg_store")
    topics = []
    for q in range(len(split)):
        n0, n1 = int(split.ent_ptr[q]), int(split.ent_ptr[q + 1])
        ids = split.entity_ids[n0:n1][split.topic_mask[n0:n1]].tolist()
        topics.append(np.array([store.entities.get(index.entities[e]) for e in ids], dtype=np.int64))
    named = [[([index.relations[r] for r in c], s) for c, s in per_q] for per_q in beams]
    whole = gsr_store_retrieve(store, topics, named, top_n=3)
    hits = {"per question": 0, "whole KG": 0}
    for q in range(len(split)):
        e0, e1 = int(split.edge_ptr[q]), int(split.edge_ptr[q + 1])
        local = torch.nonzero(torch.isfinite(scores[e0:e1])).flatten() + e0
        names = {
            (index.entities[h], index.relations[r], index.entities[t])
            for h, r, t in split.global_edges_at(local).reshape(-1, 3).tolist()
        }
        found = set(store.triples(whole.edges[q]))
        assert names <= found, split.ids[q]
        answers = set(split.answers[q])
        hits["per question"] += bool(answers & {x for h, _, t in names for x in (h, t)})
        hits["whole KG"] += bool(answers & {x for h, _, t in found for x in (h, t)})
    print(hits)
    assert hits["whole KG"] >= hits["per question"] > 0.8 * len(split)


def test_whole_kg_search_as_the_page_shows_it(mini_kg, user_cache, monkeypatch):
    """docs/how-to/own-kg.md's whole-KG snippet, as written, over the union of webqsp_mini's graphs."""
    from .test_doc_trained_runs import OWN_KG, blocks

    monkeypatch.chdir(mini_kg)
    monkeypatch.setenv("GSR_TRAIN_CACHE", str(user_cache))
    (snippet,) = [b for b in blocks(OWN_KG, lang="python") if "simgrag_store_retrieve" in b]
    scope: dict = {}
    exec(snippet, scope)
    best = scope["store"].triples(scope["simgrag"].subgraphs[0][0].edges)
    ((head, relation, tail),) = best  # the fixture stores this fact tail to head
    assert relation == "people.person.nationality" and {head, tail} == {"Justin Bieber", "Canada"}
    assert scope["store"].display_names(scope["gsr"].answers[0]).to_pylist() == ["Canada"]
    assert scope["vectors"].entities.kind == "exact"
