"""Stages that work over runs of graphs (bounded memory) give the same numbers as one pass.

At real size a split has 10-100M edges, so DDE features, cosine scores, SubgraphRAG
projections and supervision checks run over bounded runs of whole graphs; these tests force
tiny runs on the real webqsp_mini graphs and compare with the one-pass results.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gsr_train.arrays import segment_count, segment_sum
from gsr_train.datamodules.triple_datamodule import trainable_questions
from gsr_train.features.structure import NodeFeatures, node_features, structure_features
from gsr_train.kg.index import get_index
from gsr_train.kg.paths import build_supervision, get_supervision
from gsr_train.kg.vocab import StringVocab
from gsr_train.models.subgraphrag.scorer import ScorerConfig, TripleScorer
from gsr_train.retrievers.cosine import cosine_scores
from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever
from gsr_train.text.embeddings import get_embeddings, texts_hash

SPLITS = ["train", "validation", "test"]


@pytest.fixture(scope="module")
def mini(webqsp_mini, tmp_path_factory):
    cache = tmp_path_factory.mktemp("bounded")
    index = get_index(webqsp_mini, SPLITS, cache_dir=cache, skip_invalid=True)
    emb = get_embeddings(index, {"name": "hashing", "dim": 32}, cache)
    return index, emb, cache


@pytest.mark.parametrize("structure", ["dde", "topic"])
def test_node_features_over_runs_equal_one_pass(mini, structure):
    index, _, _ = mini
    split = index["train"]
    whole = NodeFeatures.from_dense(structure_features(split, structure))
    for max_edges in (300, 4000):
        runs = node_features(split, structure, max_edges=max_edges)
        assert len(split.chunk_bounds(max_edges)) > 3
        assert runs.rows.dtype == torch.int32
        assert torch.equal(runs.table, whole.table)
        assert torch.equal(runs.rows.long(), whole.rows)


@pytest.mark.parametrize("serving", ["compiled", "torch"])
def test_projection_budget_splits_scoring_without_changing_scores(mini, serving):
    index, emb, _ = mini
    torch.manual_seed(0)
    scorer = TripleScorer(
        ScorerConfig.from_options({"hidden": 24, "cos_features": True, "qr_product": True}, emb.dim)
    ).eval()
    split = index["test"]
    whole = SubgraphRAGRetriever(scorer, serving=serving)
    small = SubgraphRAGRetriever(scorer, serving=serving, max_projection_bytes=200_000)
    assert whole.fits_whole(emb) and not small.fits_whole(emb)
    runs = small.parts(emb, split)
    assert len(runs) > 3 and runs[0][0] == 0 and runs[-1][1] == len(split)
    assert all(a[1] == b[0] for a, b in zip(runs, runs[1:]))
    a = whole.score_split(split, emb.question["test"], emb, graphs_per_batch=16)
    b = small.score_split(split, emb.question["test"], emb, graphs_per_batch=16)
    assert torch.allclose(a, b, atol=1e-5, rtol=0)


def test_cosine_over_runs_equals_one_pass(mini):
    index, emb, _ = mini
    split = index["test"]
    one = cosine_scores(split, emb.question["test"], emb, max_edges=10**9)
    runs = cosine_scores(split, emb.question["test"], emb, max_edges=500)
    assert torch.allclose(one, runs, atol=1e-6, rtol=0)


def test_vocab_texts_hash_equals_list_hash_and_embeddings_match(mini, tmp_path):
    index, emb, _ = mini
    names = list(index.entities)
    assert isinstance(index.entities, StringVocab)
    assert texts_hash(index.entities) == texts_hash(names)
    mask = index.entity_has_text().numpy()
    assert texts_hash(index.entities, mask) == texts_hash(names, mask)
    # the vocabulary path and the list path embed the same rows
    from gsr_train.text.embeddings import embed_texts

    listed = embed_texts(names, {"name": "hashing", "dim": 32}, tmp_path, kind="entity", encode_mask=mask)
    assert torch.equal(listed, emb.entity)


def test_vocab_and_list_paths_batch_texts_in_the_same_order(mini, tmp_path):
    """Encoders batch texts by length: the memory-mapped vocabulary must order them like a list
    of str (characters, not UTF-8 bytes), or a real encoder's batches, hence the last bits of
    its embeddings, differ from before."""
    from gsr_train.arrays import utf8_char_lengths
    from gsr_train.text.embeddings import EmbeddingTable
    from gsr_train.text.encoders import load_encoder

    index, _, _ = mini
    names = list(index.entities)
    assert any(len(n) != len(n.encode()) for n in names)  # the fixture has non-ASCII names
    lengths = utf8_char_lengths(index.entities.offsets, index.entities.data, chunk_bytes=1000)
    assert lengths.tolist() == [len(n) for n in names]
    enc = load_encoder("hashing", dim=8)
    mask = index.entity_has_text().numpy()
    by_vocab = EmbeddingTable(index.entities, enc, tmp_path, "entity", mask)._plan()[1]
    by_list = EmbeddingTable(names, enc, tmp_path, "entity", mask)._plan()[1]
    assert np.array_equal(by_vocab, by_list)


def test_segment_sum_matches_a_loop():
    rng = np.random.default_rng(0)
    for _ in range(300):
        sizes = rng.integers(0, 4, rng.integers(0, 12))
        ptr = np.concatenate([[0], np.cumsum(sizes)])
        values = rng.random(int(ptr[-1]) + int(rng.integers(0, 3))) < 0.5  # may run past ptr[-1]
        expected = [int(values[a:b].sum()) for a, b in zip(ptr[:-1], ptr[1:])]
        assert segment_sum(values, ptr).tolist() == expected
        mask = torch.from_numpy(values)
        assert segment_count(mask, torch.from_numpy(ptr)).tolist() == expected  # the torch twin
        if len(ptr) > 1 and ptr[-1] == len(values):  # PyG's segment: float only on CPU, needs the whole range
            from torch_geometric.utils import segment

            assert segment(mask.double(), torch.from_numpy(ptr)).long().tolist() == expected


def test_trainable_questions_and_supervision_over_runs(mini):
    index, _, cache = mini
    split = index["train"]
    sup = get_supervision(index, "train", cache)
    keep, skipped = trainable_questions(split, sup.triple_label)
    per_q = torch.zeros(len(split), dtype=torch.long).index_add_(0, split.edge_question(), sup.triple_label.long())
    expected = ((split.num_edges > 0) & (per_q > 0)).nonzero().flatten()
    assert torch.equal(keep, expected) and skipped["kept"] == expected.numel()
    assert torch.equal(sup.num_positives(split), per_q)
    small = build_supervision(split, chunk_states=2000)
    assert torch.equal(small.triple_label, sup.triple_label) and torch.equal(small.hops, sup.hops)
    assert small.chains_raw == sup.chains_raw


def test_results_name_triples_from_the_mapped_vocabulary(mini, tmp_path):
    from gsr_train.eval.results import read_results, write_results
    from gsr_train.eval.retrieval import edge_ranks

    index, emb, _ = mini
    split = index["test"]
    scores = cosine_scores(split, emb.question["test"], emb)
    path = tmp_path / "r.jsonl"
    write_results(path, index, "test", scores, 7)
    back, _ = read_results(path, index, "test")  # names -> edges of each question again
    assert torch.equal(edge_ranks(split, back, max_rank=7), edge_ranks(split, scores, max_rank=7))
    assert torch.equal(split.global_edges_at(torch.arange(split.total_edges)), split.global_edges())
    assert torch.equal(split.edge_owner(torch.arange(split.total_edges)), split.edge_question())


def test_kg_wide_statistics_over_runs_equal_one_pass(mini, monkeypatch):
    """Schema triples, GSR relation subjects and pseudo-question subjects read the splits run by run."""
    from gsr_train.datamodules.gsr_data import relation_subjects
    from gsr_train.kg.index import SplitGraphs
    from gsr_train.kg.schema import split_triples
    from gsr_train.llm.steps.pseudo_questions import subjects_by_relation

    index, _, _ = mini
    relations = list(index.relations)[:40]

    def compute():
        return (
            split_triples(index, SPLITS),
            relation_subjects(index, SPLITS, per_relation=5),
            subjects_by_relation(index, SPLITS, relations, max_subjects=5),
        )

    one = compute()
    whole = SplitGraphs.global_edge_chunks
    monkeypatch.setattr(SplitGraphs, "global_edge_chunks", lambda self, max_edges=0: whole(self, 250))
    assert len(index["train"].chunk_bounds(250)) > 10
    runs = compute()
    assert torch.equal(one[0], runs[0])
    assert one[1] == runs[1] and one[1]
    assert one[2] == runs[2] and one[2][0] and one[2][1]


def test_float16_tables_halve_the_store_and_score_like_float32(mini):
    index, emb32, cache = mini
    emb16 = get_embeddings(index, {"name": "hashing", "dim": 32, "dtype": "float16"}, cache)
    assert emb16.entity.dtype == torch.float16 and emb16.meta["dtype"] == "float16"
    from pathlib import Path

    size = lambda e: Path(e.meta["tables"]["entity"]["path"]).stat().st_size  # noqa: E731
    assert size(emb16) < 0.55 * size(emb32)
    assert torch.allclose(emb16.entity.float(), emb32.entity, atol=1e-3)
    split = index["test"]
    a = cosine_scores(split, emb32.question["test"], emb32)
    b = cosine_scores(split, emb16.question["test"], emb16)
    assert torch.allclose(a, b, atol=5e-3)
    torch.manual_seed(0)
    scorer = TripleScorer(ScorerConfig.from_options({"hidden": 16, "cos_features": True}, 32)).eval()
    for serving in ("compiled", "torch"):
        s32 = SubgraphRAGRetriever(scorer, serving=serving).score_split(split, emb32.question["test"], emb32)
        s16 = SubgraphRAGRetriever(scorer, serving=serving).score_split(split, emb16.question["test"], emb16)
        assert torch.allclose(s32, s16, atol=5e-2)
    with pytest.raises(ValueError, match="dtype"):
        get_embeddings(index, {"name": "hashing", "dim": 32, "dtype": "int8"}, cache)


def _rowwise_similarities(split, question_emb, emb):
    """classic.similarities computed row by row: free of the BLAS blocking that makes a
    similarity's last bit depend on which questions share a matmul (ties then swap ranks)."""
    import torch.nn.functional as F

    node_q = torch.repeat_interleave(torch.arange(len(split)), split.num_entities)
    edge_q = split.edge_question()
    q = F.normalize(question_emb.float(), dim=-1)
    ent = F.normalize(emb.entity[split.entity_ids.long()].float(), dim=-1)
    rel = F.normalize(emb.relation[split.edge_rel.long()].float(), dim=-1)
    has_text = emb.entity_has_text[split.entity_ids.long()].bool()
    node_sim = (ent * q[node_q]).sum(1)
    return torch.where(has_text, node_sim, torch.zeros_like(node_sim)), has_text, (rel * q[edge_q]).sum(1)


@pytest.mark.parametrize("method", ["triplets", "paths", "pcst"])
def test_classic_retrievers_over_runs_equal_one_pass(mini, method, monkeypatch):
    import gsr_train.retrievers.classic as classic

    monkeypatch.setattr(classic, "similarities", _rowwise_similarities)
    index, emb, _ = mini
    split = index["test"].slice(0, 40)
    q = emb.question["test"][:40]
    one = classic.classic_scores(split, q, emb, method, max_edges=10**9)
    runs = classic.classic_scores(split, q, emb, method, max_edges=3000)
    assert len(split.chunk_bounds(3000)) > 3
    assert torch.equal(one, runs)
