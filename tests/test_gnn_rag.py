"""The GNN-RAG style retriever: node-level training, shortest-path evidence, the plugin path."""

from __future__ import annotations

import torch

from gsr_train.models.gnn_rag import GNNRAG, shortest_path_scores


def test_evidence_is_the_shortest_paths_to_the_likeliest_answers():
    # topic 0 -> 1 -> 2 (answer, p 0.9); 0 -> 3 (p 0.2); 3 -> 1 is off every shortest path; 4 unreached
    head = torch.tensor([0, 1, 0, 3, 4])
    tail = torch.tensor([1, 2, 3, 1, 4])
    topic = torch.tensor([True, False, False, False, False])
    prob = torch.tensor([0.0, 0.1, 0.9, 0.2, 0.95])
    s = shortest_path_scores(head, tail, topic, prob, max_hops=3)
    order = torch.argsort(s, descending=True).tolist()
    assert order[:2] == [1, 0]  # the path to the answer, the edge into it first
    assert order[2] == 2  # then the path to the weaker candidate
    assert s[3] < 0 and s[4] < 0  # off the shortest-path DAG / not reachable: after every path
    # reversed triples (answer -> ... -> topic) are followed the same way
    r = shortest_path_scores(tail, head, topic, prob, max_hops=3)
    assert torch.argsort(r, descending=True).tolist()[:2] == [1, 0]


def test_each_candidate_gets_one_shortest_path_from_a_topic_entity():
    from gsr_train.models.gnn_rag import hop_distances, trace_paths

    # 0 (topic) -> 1 -> 2; 3 -> 0 (stored towards the topic); 3 -> 1 is not shortest; 4 unreached
    head = torch.tensor([0, 1, 3, 3, 4])
    tail = torch.tensor([1, 2, 0, 1, 4])
    topic = torch.tensor([True, False, False, False, False])
    dist = hop_distances(head, tail, topic, max_hops=3)
    assert dist.tolist() == [0, 1, 2, 1, 4]
    paths = trace_paths(head, tail, dist, torch.tensor([2, 3, 4, 0]), max_hops=3)
    assert paths.tolist() == [[0, 1, -1], [2, -1, -1], [-1, -1, -1], [-1, -1, -1]]
    # two ways into node 3 (via 1 or via 2): the edge the weights prefer is taken
    head, tail = torch.tensor([0, 0, 1, 2]), torch.tensor([1, 2, 3, 3])
    dist = hop_distances(head, tail, torch.tensor([True, False, False, False]), max_hops=2)
    node3 = torch.tensor([3])
    assert trace_paths(head, tail, dist, node3, 2).tolist() == [[1, 3]]  # no weights: the last listed
    assert trace_paths(head, tail, dist, node3, 2, torch.tensor([0.0, 0.0, 0.9, 0.1])).tolist() == [[0, 2]]


def test_node_training_step_and_forward_on_real_batches(webqsp_mini, tmp_path):
    from gsr_train.features.structure import node_features
    from gsr_train.features.triple_batch import make_batch
    from gsr_train.kg.index import get_index

    index = get_index(str(webqsp_mini), splits=("test",), cache_dir=tmp_path)
    split = index["test"]
    dim = 8
    gen = torch.Generator().manual_seed(0)
    q_emb = torch.randn(len(split), dim, generator=gen)
    ent = torch.randn(len(index.entities), dim, generator=gen)
    rel = torch.randn(len(index.relations), dim, generator=gen)
    has_text = torch.ones(len(index.entities), dtype=torch.bool)
    feats = node_features(split, GNNRAG.structure)
    batch = make_batch(split, [0, 1, 2], feats, q_emb, ent, has_text, rel)
    assert batch.node_answer is not None and int(batch.node_answer.sum()) > 0
    module = GNNRAG.create(dim=dim, hidden=16, rounds=2)
    loss = module.training_step(batch, 0)
    loss.backward()
    assert torch.isfinite(loss) and module.members[0].scorer[0].weight.grad is not None
    scores = module(batch)
    assert scores.shape == (batch.num_triples,) and torch.isfinite(scores).all()


def test_bad_options_are_named():
    import pytest

    with pytest.raises(ValueError, match="hidden, rounds, max_hops, passes and members must be >= 1"):
        GNNRAG(dim=4, rounds=0)


def test_candidates_are_the_likeliest_non_topic_nodes_per_question(webqsp_mini, tmp_path):
    from gsr_train.features.structure import node_features
    from gsr_train.kg.index import get_index
    from gsr_train.retrievers.edge_scorer import answer_rows, score_split

    class Emb:  # the embedding tables score_split reads
        def __init__(self, index, dim):
            gen = torch.Generator().manual_seed(1)
            self.entity = torch.randn(len(index.entities), dim, generator=gen)
            self.relation = torch.randn(len(index.relations), dim, generator=gen)
            self.entity_has_text = torch.ones(len(index.entities), dtype=torch.bool)

    index = get_index(str(webqsp_mini), splits=("test",), cache_dir=tmp_path)
    split = index["test"]
    emb = Emb(index, 8)
    q_emb = torch.randn(len(split), 8, generator=torch.Generator().manual_seed(2))
    module = GNNRAG.create(dim=8, hidden=16, rounds=2).eval()
    scores, found = score_split(module, split, q_emb, emb, graphs_per_batch=50)
    assert scores.shape == (int(split.edge_ptr[-1]),) and found is not None
    answers = found.per_question(len(split))
    fields = answer_rows(index, split, found)
    rows, paths = fields["answers"], fields["paths"]
    for q in (0, 7, len(split) - 1):
        probs = [p for _, p, _ in answers[q]]
        assert 0 < len(answers[q]) <= 5 and probs == sorted(probs, reverse=True)
        nodes = slice(int(split.ent_ptr[q]), int(split.ent_ptr[q + 1]))
        graph = set(split.entity_ids[nodes].tolist())
        topic = set(split.entity_ids[nodes][split.topic_mask[nodes]].tolist())
        assert all(e in graph and e not in topic for e, _, _ in answers[q])
        # each path runs from a topic entity to its candidate over triples of this question's graph
        edges = range(int(split.edge_ptr[q]), int(split.edge_ptr[q + 1]))
        topic_names = {index.entities[e] for e in topic}
        with_path = [(e, path) for e, _, path in answers[q] if path]
        assert len(paths[q]) == len(with_path) > 0
        for (e, path), text in zip(with_path, paths[q]):
            assert all(x in edges for x in path)
            assert any(text.startswith(t + " ") for t in topic_names) and text.endswith(" " + index.entities[e])
            assert text.count(" -> ") + text.count(" <- ") == 2 * len(path)
    assert rows[0][0]["name"] == index.entities[answers[0][0][0]] and 0.0 <= rows[0][0]["prob"] <= 1.0
    feats = node_features(split, GNNRAG.structure)
    assert feats.rows.numel() == int(split.ent_ptr[-1])


def test_a_graph_without_a_topic_entity_is_counted_and_gets_no_path(webqsp_mini, tmp_path):
    import dataclasses

    from gsr_train.kg.index import get_index
    from gsr_train.retrievers.edge_scorer import serve
    from gsr_train.retrievers.interface import ROW_FIELDS

    index = get_index(str(webqsp_mini), splits=("test",), cache_dir=tmp_path)
    split = index["test"]
    mask = split.topic_mask.clone()
    mask[int(split.ent_ptr[3]) : int(split.ent_ptr[4])] = False  # question 3 loses its topic entity
    broken = dataclasses.replace(split, topic_mask=mask)
    gen = torch.Generator().manual_seed(3)

    class Emb:
        entity = torch.randn(len(index.entities), 8, generator=gen)
        relation = torch.randn(len(index.relations), 8, generator=gen)
        entity_has_text = torch.ones(len(index.entities), dtype=torch.bool)

    module = GNNRAG.create(dim=8, hidden=16, rounds=2).eval()
    scores, extra = serve(module, index, broken, torch.randn(len(split), 8, generator=gen), Emb(), 64)
    assert torch.isfinite(scores).all()
    assert extra["no_topic_entity"] == 1 and extra["no_candidate"] == 0
    rows = extra[ROW_FIELDS]
    assert rows["answers"][3] and rows["paths"][3] == []  # candidates still ranked, no path to show
    assert extra["candidates_without_path"] >= len(rows["answers"][3])
    assert all(rows["paths"][q] for q in (0, 1, 2))


def test_validation_scores_the_first_answer_of_each_question(webqsp_mini, tmp_path):
    """A node scorer's validation logs val/hit@1 (what picks its checkpoint) next to the evidence recall."""
    import pytest

    from gsr_train.features.structure import node_features
    from gsr_train.features.triple_batch import make_batch
    from gsr_train.kg.index import get_index
    from gsr_train.retrievers.edge_training import EdgeRecipe, monitor_of

    index = get_index(str(webqsp_mini), splits=("test",), cache_dir=tmp_path)
    split = index["test"]
    gen = torch.Generator().manual_seed(4)
    q_emb = torch.randn(len(split), 8, generator=gen)
    ent, rel = torch.randn(len(index.entities), 8, generator=gen), torch.randn(len(index.relations), 8, generator=gen)
    has_text = torch.ones(len(index.entities), dtype=torch.bool)

    class Source:
        def validation_graphs(self):
            return split, torch.zeros(int(split.edge_ptr[-1]))

    module = GNNRAG.create(dim=8, hidden=16, rounds=2).eval().validate_on(Source())
    logged: dict[str, float] = {}
    module.log = lambda name, value, **_: logged.__setitem__(name, value)  # type: ignore[method-assign]
    module._merge_val_scores = lambda: None  # type: ignore[method-assign]  # one process: nothing to merge
    feats = node_features(split, GNNRAG.structure)
    module.on_validation_epoch_start()
    expected = []
    with torch.no_grad():
        for start in range(0, len(split), 100):
            batch = make_batch(
                split, list(range(start, min(len(split), start + 100))), feats, q_emb, ent, has_text, rel
            )
            module.validation_step(batch, 0)
            _, found = module.score_batch(batch, 1)
            expected += batch.node_answer[found.nodes].float().tolist()
    module.on_validation_epoch_end()
    assert logged["val/hit@1"] == pytest.approx(sum(expected) / len(split)) and sum(expected) > 0
    assert "val/answer_recall@100" in logged
    recipe = EdgeRecipe("train", "validation", 16, "retriever.train.graphs_per_batch", 64, 12, 4, 30)
    assert monitor_of(recipe, GNNRAG.targets) == "val/hit@1" and monitor_of(recipe) == "val/sp_recall@30"


def _random_tables(index, split, dim, seed):
    """Embedding tables shaped like a run's (some entities without text), and question embeddings."""
    gen = torch.Generator().manual_seed(seed)

    class Emb:
        entity = torch.randn(len(index.entities), dim, generator=gen)
        relation = torch.randn(len(index.relations), dim, generator=gen)
        entity_has_text = torch.rand(len(index.entities), generator=gen) > 0.2

    return Emb(), torch.randn(len(split), dim, generator=gen)


def _ranking(scores, split):
    """Every triple's position in its question's ranking (best first, ties to the earlier triple)."""
    import numpy as np

    question = np.repeat(np.arange(len(split)), split.num_edges.numpy())
    return np.lexsort((np.arange(scores.numel()), -scores.double().numpy(), question))


def test_serving_gives_the_rows_of_the_reference_path(webqsp_mini, tmp_path):
    """The vectorised serving path (pair-level relation gates, the compiled mean kernel, array-built
    rows) against the old one kept in tests/oracles: same scores, triple order, answers and paths."""
    import dataclasses

    import numpy as np

    from gsr_train.kg.index import get_index
    from gsr_train.retrievers.edge_scorer import serve

    from .oracles import gnn_serving_reference as reference

    index = get_index(str(webqsp_mini), splits=("test",), cache_dir=tmp_path)
    split = index["test"]
    mask = split.topic_mask.clone()
    mask[int(split.ent_ptr[5]) : int(split.ent_ptr[6])] = False  # one graph without a topic entity
    split = dataclasses.replace(split, topic_mask=mask)
    emb, q_emb = _random_tables(index, split, 16, seed=5)
    torch.manual_seed(6)
    module = GNNRAG.create(dim=16, hidden=32, rounds=3, max_hops=3).eval()
    with torch.no_grad():  # spread the scores: fresh biases leave most nodes near one probability
        for p in module.parameters():
            p.add_(0.3 * torch.randn_like(p))
    old_scores, old = reference.serve(module, index, split, q_emb, emb, 50)
    scores, new = serve(module, index, split, q_emb, emb, 50)
    torch.testing.assert_close(scores, old_scores, rtol=0, atol=1e-6)
    assert np.array_equal(_ranking(scores, split), _ranking(old_scores, split))
    assert new["row_fields"]["answers"] == old["row_fields"]["answers"]
    assert new["row_fields"]["paths"] == old["row_fields"]["paths"]
    assert {k: v for k, v in new.items() if k != "row_fields"} == {k: v for k, v in old.items() if k != "row_fields"}
    assert new["no_topic_entity"] == 1 and new["row_fields"]["paths"][5] == []
    assert sum(len(p) for p in new["row_fields"]["paths"]) > len(split)  # paths of several steps were written
    assert any(" <- " in p for row in new["row_fields"]["paths"] for p in row)  # and both arrow directions


def test_mean_kernel_matches_scatter_mean_bit_for_bit():
    """relation_means (compiled on CPU, torch elsewhere) is PyG's mean of x_j * rel_ij: same float32
    sums in the same order, both directions into strided blocks of a wider buffer, nodes without triples at zero,
    whatever the number of threads."""
    from torch_geometric.utils import scatter

    from gsr_train.models.gnn_rag_kernels import incoming, relation_means

    gen = torch.Generator().manual_seed(7)
    n, t, p, h = 300, 2000, 40, 24
    head = torch.randint(0, n - 20, (t,), generator=gen)  # the last 20 nodes receive nothing
    tail = torch.randint(0, n - 20, (t,), generator=gen)
    tail[:500] = 3  # a hub: many terms in one sum
    pair = torch.randint(0, p, (t,), generator=gen)
    x, rel = torch.randn(n, h, generator=gen), torch.randn(p, h, generator=gen)
    expected = scatter(x[head] * rel[pair], tail, dim=0, dim_size=n, reduce="mean")
    backward = scatter(x[tail] * rel[pair], head, dim=0, dim_size=n, reduce="mean")
    directions = [(rel, head, incoming(tail, n)), (rel, tail, incoming(head, n))]
    for threads in (1, 2, 5):
        torch.set_num_threads(threads)
        out = torch.full((n, 3 * h), float("nan"))
        relation_means(out[:, h:], x, pair, directions)
        assert torch.equal(out[:, h : 2 * h], expected) and torch.equal(out[:, 2 * h :], backward)
        assert torch.isnan(out[:, :h]).all()
    # the path of other devices and dtypes (index_add_), taken here by float64 inputs
    wide = torch.empty(n, 2 * h, dtype=torch.float64)
    relation_means(wide, x.double(), pair, [(rel.double(), s, into) for _, s, into in directions])
    torch.testing.assert_close(wide.float(), torch.cat([expected, backward], 1), rtol=1e-5, atol=1e-6)
    assert (expected[n - 20 :] == 0).all()


def test_training_and_serving_message_passing_agree(webqsp_mini, tmp_path):
    """With gradients (training) the rounds go through MessagePassing.propagate, without them through
    the fused means: the same logits either way."""
    from gsr_train.features.structure import node_features
    from gsr_train.features.triple_batch import make_batch
    from gsr_train.kg.index import get_index

    index = get_index(str(webqsp_mini), splits=("test",), cache_dir=tmp_path)
    split = index["test"]
    emb, q_emb = _random_tables(index, split, 8, seed=8)
    batch = make_batch(
        split, list(range(20)), node_features(split, "dde"), q_emb, emb.entity, emb.entity_has_text, emb.relation
    )
    module = GNNRAG.create(dim=8, hidden=16, rounds=2).eval()
    with torch.enable_grad():
        trained_path = module.node_logits(batch)
    assert trained_path.requires_grad
    with torch.no_grad():
        served = module.node_logits(batch)
    torch.testing.assert_close(served, trained_path.detach(), rtol=0, atol=1e-6)


def test_rows_of_short_paths_in_a_small_last_graph():
    """Path rows are padded past their last step; the padding must not be read as an edge of the
    candidate's graph (the split's edge 0 here names node 6, past the last graph's two nodes)."""
    import numpy as np

    from gsr_train.kg.index import SplitGraphs
    from gsr_train.kg.vocab import StringVocab
    from gsr_train.retrievers.edge_scorer import Candidates, answer_rows, candidate_counts

    split = SplitGraphs(
        ids=["q0", "q1"],
        questions=["", ""],
        answers=[[], []],
        ent_ptr=torch.tensor([0, 7, 9]),
        entity_ids=torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8]),
        topic_mask=torch.tensor([True] + [False] * 6 + [True, False]),
        answer_mask=torch.zeros(9, dtype=torch.bool),
        edge_ptr=torch.tensor([0, 2, 3]),
        edge_index=torch.tensor([[5, 0, 1], [6, 5, 0]]),  # q1's one triple is stored answer -> topic
        edge_rel=torch.tensor([0, 1, 2]),
    )

    class Index:
        entities = StringVocab.from_list([f"e{i}" for i in range(9)])
        relations = StringVocab.from_list(["r0", "r1", "r2"])

    found = Candidates(
        question=np.array([0, 1, 1]),
        entity=np.array([6, 8, 7]),
        prob=np.array([0.9, 0.5, 0.25], np.float32),
        path=np.array([[1, 0, -1], [2, -1, -1], [-1, -1, -1]]),
    )
    rows = answer_rows(Index(), split, found)
    assert rows["paths"] == [["e0 -> r1 -> e5 -> r0 -> e6"], ["e7 <- r2 <- e8"]]
    assert rows["answers"][1] == [{"name": "e8", "prob": 0.5}, {"name": "e7", "prob": 0.25}]
    assert candidate_counts(split, found) == {
        "no_topic_entity": 0,
        "no_candidate": 0,
        "candidates": 3,
        "candidates_without_path": 1,
    }
    assert found.per_question(2)[1] == [(8, 0.5, (2,)), (7, 0.25, ())]


def test_serving_raises_the_thresholds_of_kept_memory_never_lowers_them(monkeypatch, malloc_requests):
    """Serving asks glibc to keep freed blocks up to 1 GB (its batches' [N, 2h] tensors are 100+ MB);
    a later caller asking for SubgraphRAG's smaller thresholds leaves them, a larger ask raises them."""
    import gsr_train.memory as memory

    calls = malloc_requests
    monkeypatch.setattr(memory, "_policy", None)
    assert memory.keep_freed_memory()
    assert memory.keep_freed_memory(mmap_threshold=1 << 30, trim_threshold=1 << 31)
    assert memory.keep_freed_memory()  # SubgraphRAG's defaults after serving: nothing lowered
    assert [c[memory._M_MMAP_THRESHOLD] for c in calls] == [1 << 27, 1 << 30]
    assert memory._kept == (1 << 30, 1 << 31, 1 << 26)
    memory.return_freed_memory()  # the readers' policy, then serving again: applied afresh
    assert memory.keep_freed_memory(mmap_threshold=1 << 30, trim_threshold=1 << 31) and len(calls) == 4


def _real_batch(webqsp_mini, tmp_path, dim=8):
    from gsr_train.features.structure import node_features
    from gsr_train.features.triple_batch import make_batch
    from gsr_train.kg.index import get_index

    index = get_index(str(webqsp_mini), splits=("test",), cache_dir=tmp_path)
    split = index["test"]
    gen = torch.Generator().manual_seed(0)
    q_emb = torch.randn(len(split), dim, generator=gen)
    ent = torch.randn(len(index.entities), dim, generator=gen)
    rel = torch.randn(len(index.relations), dim, generator=gen)
    has_text = torch.ones(len(index.entities), dtype=torch.bool)
    return make_batch(split, [0, 1, 2, 3], node_features(split, GNNRAG.structure), q_emb, ent, has_text, rel)


def test_adaptive_passes_and_members_train_and_serve(webqsp_mini, tmp_path):
    """ReaRev's adaptive passes change the answer (the instructions are updated), every weight of
    every member learns, and serving averages the members' probabilities."""
    batch = _real_batch(webqsp_mini, tmp_path)
    torch.manual_seed(0)
    module = GNNRAG.create(dim=8, hidden=16, rounds=2, passes=2, members=3, dropout=0.0)
    loss = module.training_step(batch, 0)
    loss.backward()
    assert torch.isfinite(loss)
    for name, p in module.named_parameters():
        if not name.endswith("no_text"):  # the state of nameless nodes: these graphs may have none
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    # the loss is the mean of the members' own losses (an ensemble, not one wider model)
    logits, labels, group = module.training_targets(batch)
    n = batch.node_answer.numel()
    each = [GNNRAG.__mro__[1].loss_on(module, logits[i * n : (i + 1) * n], labels[:n], group[:n], 4) for i in range(3)]
    assert torch.allclose(module.loss_on(logits, labels, group, 4), torch.stack(each).mean())
    module.eval()
    with torch.no_grad():
        mixed = torch.sigmoid(module.node_logits(batch))
        topic = module._topic(batch)
        probs = torch.stack([torch.sigmoid(m(batch, topic)[0]) for m in module.members]).mean(0)
        one_pass = module.members[0]
        one_pass.passes = 1
        first = one_pass(batch, topic)[0]
        one_pass.passes = 2
        assert not torch.allclose(first, module.members[0](batch, topic)[0])
    assert torch.allclose(mixed, probs, atol=1e-5)
    scores, found = module.score_batch(batch, 2)
    assert scores.shape == (batch.num_triples,) and found.nodes.numel() > 0


def test_a_single_gnn_checkpoint_from_before_members_loads(webqsp_mini, tmp_path):
    batch = _real_batch(webqsp_mini, tmp_path)
    module = GNNRAG.create(dim=8, hidden=16, rounds=2).eval()
    old_keys = {k.removeprefix("members.0."): v for k, v in module.state_dict().items()}
    assert "scorer.0.weight" in old_keys
    again = GNNRAG(dim=8, hidden=16, rounds=2).eval()
    again.load_state_dict(old_keys)
    with torch.no_grad():
        assert torch.equal(module.node_logits(batch), again.node_logits(batch))


def test_label_smoothing_mixes_the_uniform_distribution_into_the_listwise_target():
    from gsr_train.models.edge_scorer import listwise_loss

    logits = torch.tensor([2.0, 0.0, -1.0, 1.0, 0.5])
    labels = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0])
    group = torch.tensor([0, 0, 0, 1, 1])
    log_p0 = torch.log_softmax(logits[:3], 0)
    log_p1 = torch.log_softmax(logits[3:], 0)
    plain = (-log_p0[0] + -log_p1[1]) / 2
    assert torch.allclose(listwise_loss(logits, labels, group, 2), plain)
    eps = 0.2
    smooth = ((1 - eps) * -log_p0[0] + eps * -log_p0.mean() + (1 - eps) * -log_p1[1] + eps * -log_p1.mean()) / 2
    assert torch.allclose(listwise_loss(logits, labels, group, 2, smoothing=eps), smooth)


def test_path_bonus_ranks_one_path_per_answer_before_alternative_paths():
    from gsr_train.models.gnn_rag import path_tree_scores

    # topic 0; answer 2 (p 0.9) by 0 -> 1 -> 2 and by 0 -> 3 -> 2; node 4 (p 0.5) by 0 -> 4
    head = torch.tensor([0, 1, 0, 3, 0])
    tail = torch.tensor([1, 2, 3, 2, 4])
    topic = torch.tensor([True, False, False, False, False])
    prob = torch.tensor([0.0, 0.1, 0.9, 0.1, 0.5])
    weight = torch.tensor([1.0, 0.9, 1.0, 0.1, 1.0])  # into 2, the step from 1 is followed more
    dag = shortest_path_scores(head, tail, topic, prob, max_hops=3)
    assert set(torch.argsort(dag, descending=True)[:4].tolist()) == {0, 1, 2, 3}  # both paths to 2, then 4
    first = path_tree_scores(head, tail, topic, prob, 3, weight=weight, bonus=1.0)
    # one path to 2, then 4, then 3 (its one way in: a tree edge), then 2's other way in
    assert torch.argsort(first, descending=True).tolist() == [1, 0, 4, 2, 3]
    half = path_tree_scores(head, tail, topic, prob, 3, weight=weight, bonus=0.3)
    order = torch.argsort(half, descending=True).tolist()
    assert order == [1, 0, 3, 4, 2]  # 2's other way in (0.9) before 4's path (0.3 + 0.5)
    with torch.no_grad():
        module = GNNRAG(dim=4, path_bonus=0.5)
    assert module.path_bonus == 0.5
    import pytest

    with pytest.raises(ValueError, match="path_bonus must be in"):
        GNNRAG(dim=4, path_bonus=2.0)


def test_relation_init_reads_each_nodes_relations(webqsp_mini, tmp_path):
    from gsr_train.models.gnn_rag import _relation_means

    batch = _real_batch(webqsp_mini, tmp_path)
    module = GNNRAG.create(dim=8, hidden=16, rounds=2, relation_init=True)
    project = module.members[0].relation_in
    got = _relation_means(batch, project)
    rel = project(batch.rel_emb)[batch.pair_rel[batch.triple_pair]]
    node = int(batch.tail[0])
    into, out = batch.tail == node, batch.head == node
    want = rel[into, :16].mean(0) + (rel[out, 16:].mean(0) if out.any() else 0)
    assert torch.allclose(got[node], want, atol=1e-6)
    loss = module.training_step(batch, 0)
    loss.backward()
    assert project.weight.grad is not None and project.weight.grad.abs().sum() > 0


def test_similarity_features_are_the_encoders_cosines(webqsp_mini, tmp_path):
    import torch.nn.functional as F

    from gsr_train.models.gnn_rag import text_similarities

    batch = _real_batch(webqsp_mini, tmp_path)
    pair, node = text_similarities(batch)
    p = 3
    want = F.cosine_similarity(batch.q_emb[batch.pair_q[p]], batch.rel_emb[batch.pair_rel[p]], dim=0)
    assert torch.allclose(pair[p], want, atol=1e-6)
    texted = torch.nonzero(batch.node_ent < batch.ent_emb.shape[0]).flatten()
    n = int(texted[7])
    want = F.cosine_similarity(batch.q_emb[batch.node_q[n]], batch.ent_emb[batch.node_ent[n]], dim=0)
    assert torch.allclose(node[n], want, atol=1e-6)
    assert pair.shape == batch.pair_q.shape and node.shape == batch.node_q.shape
    module = GNNRAG.create(dim=8, hidden=16, rounds=2, similarity=True)
    loss = module.training_step(batch, 0)
    loss.backward()
    assert all(lin.weight.grad is not None for lin in module.members[0].similar_follow)


def test_path_supervision_asks_each_round_about_its_own_hop(webqsp_mini, tmp_path):
    """NSM's intermediate supervision: round i is asked about the triples from hop i to hop i + 1
    only, against the shortest-path labels; it adds to the answer loss and trains the follow gates."""
    from gsr_train.features.structure import node_features
    from gsr_train.features.triple_batch import make_batch
    from gsr_train.kg.index import get_index
    from gsr_train.kg.paths import get_supervision
    from gsr_train.models.gnn_rag import hop_distances

    index = get_index(str(webqsp_mini), splits=("test",), cache_dir=tmp_path)
    split = index["test"]
    labels = get_supervision(index, "test", tmp_path).triple_label
    gen = torch.Generator().manual_seed(0)
    sizes = (len(split), len(index.entities), len(index.relations))
    q_emb, ent, rel = (torch.randn(n, 8, generator=gen) for n in sizes)
    has_text = torch.ones(len(index.entities), dtype=torch.bool)
    feats = node_features(split, GNNRAG.structure)
    batch = make_batch(split, [0, 1, 2, 3], feats, q_emb, ent, has_text, rel, labels=labels)
    assert batch.labels is not None and batch.labels.sum() > 0
    module = GNNRAG.create(dim=8, hidden=16, rounds=2, path_supervision=0.5)
    follows = torch.full((1, 2, batch.num_triples), 0.5)
    dist = hop_distances(batch.head, batch.tail, module._topic(batch), module.max_hops)
    near, step = torch.minimum(dist[batch.head], dist[batch.tail]), (dist[batch.head] - dist[batch.tail]).abs()
    first = (near == 0) & (step == 1)
    right = follows.clone()
    right[0, 0, first] = batch.labels[first].clamp(0.01, 0.99)  # round 1 right on its own hop
    assert module.step_loss(batch, right) < module.step_loss(batch, follows)
    wrong_elsewhere = right.clone()
    wrong_elsewhere[0, 0, ~first] = 1 - 0.01  # round 1's gates off its hop are not asked about
    assert torch.isclose(module.step_loss(batch, wrong_elsewhere), module.step_loss(batch, right))
    loss = module.training_step(batch, 0)
    loss.backward()
    plain = GNNRAG.create(dim=8, hidden=16, rounds=2)
    plain.load_state_dict(module.state_dict())
    torch.manual_seed(0)
    assert loss > plain.training_step(batch, 0) - 1e-6  # the step loss is added
    assert module.members[0].follow[0].weight.grad.abs().sum() > 0
