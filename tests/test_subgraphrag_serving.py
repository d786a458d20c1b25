"""Compiled one-question serving (numba kernels) equals the straightforward and torch paths.

Toy data (tests/subgraphrag_toy.py) for every model shape the kernels support, and the real
webqsp_mini graphs (hashing encoder: the graph sizes are what matters) for the default shape.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gsr_train.features.structure import dde, node_features, topic_one_hot
from gsr_train.features.triple_batch import make_batch
from gsr_train.kg.index import get_index
from gsr_train.models.subgraphrag import serving_kernels as kernels
from gsr_train.models.subgraphrag.scorer import ScorerConfig, TripleScorer
from gsr_train.models.subgraphrag.serving import CompiledQuestionScorer
from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever
from gsr_train.text.embeddings import get_embeddings

from .subgraphrag_toy import write_toy

pytestmark = pytest.mark.usefixtures("one_thread")

SUPPORTED = [
    {},  # the paper's scorer: DDE, no extra features
    {"cos_features": True, "qr_product": True},  # the project default
    {"cos_features": True},
    {"qr_product": True, "use_dde": False},  # topic one-hot only
    {"use_dde": False, "use_topic": False, "cos_features": True},  # no structure at all
    {"dde": {"forward_rounds": 3, "reverse_rounds": 1}, "qr_product": True},
]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving")
    index = get_index(write_toy(root / "data"), cache_dir=root / "cache")
    return index, get_embeddings(index, {"name": "hashing", "dim": 32}, root / "cache")


def _reference(scorer, split, emb, qs):
    cfg = scorer.config
    feats = node_features(split, cfg.structure, cfg.dde_forward, cfg.dde_reverse)
    batch = make_batch(split, qs, feats, emb.question["test"], emb.entity, emb.entity_has_text, emb.relation)
    with torch.no_grad():
        return scorer.forward_reference(batch)


@pytest.mark.parametrize("options", SUPPORTED)
def test_compiled_serving_equals_reference_and_torch_paths(toy, options):
    index, emb = toy
    torch.manual_seed(3)
    scorer = TripleScorer(ScorerConfig.from_options({"hidden": 40, **options}, emb.dim)).eval()
    with torch.no_grad():  # a trained-looking no-text row and output layer, not the init values
        scorer.no_text.normal_()
        scorer.out.weight.normal_()
    split = index["test"]
    compiled = SubgraphRAGRetriever(scorer, serving="compiled")
    torch_path = SubgraphRAGRetriever(scorer, serving="torch")
    assert compiled.uses_compiled and not torch_path.uses_compiled
    qs = list(range(len(split)))
    ref = _reference(scorer, split, emb, qs)
    fast = compiled.score_split(split, emb.question["test"], emb, graphs_per_batch=3)
    slow = torch_path.score_split(split, emb.question["test"], emb)
    assert fast.shape == ref.shape and ref.std() > 0
    assert (fast - ref).abs().max() < 1e-4
    assert (fast - slow).abs().max() < 1e-5
    for q in (0, len(split) // 2, len(split) - 1):
        one = compiled.score_question(split.graph(q), emb.question["test"][q], emb)
        part = ref[int(split.edge_ptr[q]) : int(split.edge_ptr[q + 1])]
        assert one.shape == part.shape and (one - part).abs().max() < 1e-4


def test_kernel_dde_and_relation_numbering(toy):
    index, emb = toy
    split = index["test"]
    scorer = TripleScorer(ScorerConfig.from_options({"hidden": 8}, emb.dim)).eval()
    compiled = CompiledQuestionScorer(
        scorer, scorer.precompute(emb.entity, emb.entity_has_text, emb.relation), emb.relation
    )
    for q in range(len(split)):
        g = split.graph(q)
        for code, rounds, want in (
            (2, (2, 2), dde(g.edge_index, g.topic_mask, 2, 2)),
            (2, (1, 3), dde(g.edge_index, g.topic_mask, 1, 3)),
            (1, (0, 0), topic_one_hot(g.topic_mask)),
        ):
            status, _, rows, rel_ids, pair_of_triple, distinct, feature_row, _ = kernels.prepare_graph(
                g.edge_index[0].numpy(),
                g.edge_index[1].numpy(),
                g.edge_rel.numpy(),
                g.topic_mask.numpy(),
                g.entity_ids.numpy(),
                compiled.ent_row,
                compiled.num_relations,
                code,
                *rounds,
                compiled.relation_emb_np,
                np.zeros(0, np.float32),
            )
            assert status == kernels.OK
            torch.testing.assert_close(torch.from_numpy(distinct[feature_row]), want, atol=1e-6, rtol=1e-6)
            assert len({tuple(r) for r in distinct.tolist()}) == distinct.shape[0]  # rows are distinct
            assert (rel_ids[pair_of_triple] == g.edge_rel.numpy()).all()
            assert sorted(rel_ids.tolist()) == g.edge_rel.unique().tolist()


def test_unsupported_shapes_use_the_torch_path(toy):
    _, emb = toy
    for options in ({"num_layers": 2}, {"qe_product": True}):
        scorer = TripleScorer(ScorerConfig.from_options({"hidden": 8, **options}, emb.dim))
        assert CompiledQuestionScorer.unsupported(scorer)
        assert not SubgraphRAGRetriever(scorer).uses_compiled
        with pytest.raises(ValueError, match="not possible"):
            SubgraphRAGRetriever(scorer, serving="compiled")
    with pytest.raises(ValueError, match="serving must be one of"):
        SubgraphRAGRetriever(TripleScorer(ScorerConfig(dim=emb.dim, hidden=8)), serving="fast")


def test_bad_graphs_raise_clear_errors(toy):
    index, emb = toy
    split = index["test"]
    retriever = SubgraphRAGRetriever(
        TripleScorer(ScorerConfig.from_options({"hidden": 8, "qr_product": True}, emb.dim))
    )
    g = split.graph(1)
    q = emb.question["test"][1]
    cases = [
        (
            dataclasses.replace(g, edge_index=g.edge_index.clone().index_fill_(1, torch.tensor([2]), g.num_entities)),
            r"question '.*': edge 2 refers to node .* outside \[0, ",
        ),
        (
            dataclasses.replace(g, edge_rel=g.edge_rel.clone().index_fill_(0, torch.tensor([1]), 10**6)),
            r"edge 1 has relation id 1000000, not in \[0, ",
        ),
        (
            dataclasses.replace(g, entity_ids=g.entity_ids.clone().index_fill_(0, torch.tensor([3]), -5)),
            r"node 3 has entity id -5, not in \[0, ",
        ),
    ]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            retriever.score_question(bad, q, emb)
    # projections of a subset of entities: a graph outside it is refused, not scored with garbage
    sub = retriever.scorer.precompute(emb.entity, emb.entity_has_text, emb.relation, entities=split.graph(0).entity_ids)
    compiled = CompiledQuestionScorer(retriever.scorer, sub, emb.relation)
    outside = next(i for i in range(len(split)) if bool((sub.row_of[split.graph(i).entity_ids] < 0).any()))
    with pytest.raises(ValueError, match="was not projected"):
        compiled.score(split.graph(outside), emb.question["test"][outside])


def test_graphs_without_triples(toy):
    index, emb = toy
    g = index["test"].graph(0)
    retriever = SubgraphRAGRetriever(
        TripleScorer(ScorerConfig.from_options({"hidden": 8, "cos_features": True}, emb.dim))
    )
    empty = dataclasses.replace(g, edge_index=g.edge_index[:, :0], edge_rel=g.edge_rel[:0])
    assert retriever.score_question(empty, emb.question["test"][0], emb).shape == (0,)
    no_nodes = dataclasses.replace(empty, entity_ids=g.entity_ids[:0], topic_mask=g.topic_mask[:0])
    assert retriever.score_question(no_nodes, emb.question["test"][0], emb).shape == (0,)


@pytest.mark.slow
def test_real_webqsp_mini_graphs(webqsp_mini, tmp_path):
    """Real graph shapes (hubs, CVT nodes without text, ~1,200 triples): compiled == reference."""
    index = get_index(webqsp_mini, cache_dir=tmp_path)
    emb = get_embeddings(index, {"name": "hashing", "dim": 64}, tmp_path, splits=["test"])
    torch.manual_seed(0)
    scorer = TripleScorer(
        ScorerConfig.from_options({"hidden": 64, "cos_features": True, "qr_product": True}, emb.dim)
    ).eval()
    with torch.no_grad():
        scorer.no_text.normal_()
        scorer.out.weight.normal_()
    split = index["test"]
    qs = list(range(0, len(split), 7))
    ref = _reference(scorer, split, emb, qs)
    fast = SubgraphRAGRetriever(scorer).score_split(split, emb.question["test"], emb)
    ptr = split.edge_ptr
    fast_qs = torch.cat([fast[int(ptr[q]) : int(ptr[q + 1])] for q in qs])
    assert fast_qs.shape == ref.shape and ref.std() > 0
    assert (fast_qs - ref).abs().max() < 1e-4


def test_worker_threads_give_identical_scores(toy):
    index, emb = toy
    split = index["test"]
    torch.manual_seed(4)
    scorer = TripleScorer(
        ScorerConfig.from_options({"hidden": 24, "cos_features": True, "qr_product": True}, emb.dim)
    ).eval()
    one = SubgraphRAGRetriever(scorer, workers=1).score_split(split, emb.question["test"], emb)
    before = torch.get_num_threads()
    three = SubgraphRAGRetriever(scorer, workers=3).score_split(split, emb.question["test"], emb, graphs_per_batch=7)
    assert torch.equal(one, three)
    assert torch.get_num_threads() == before  # torch's thread count is restored after the workers
