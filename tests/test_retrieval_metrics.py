import json
import math
import random

import pytest
import torch

from gsr_train.eval import retrieval
from gsr_train.eval.retrieval import (
    RetrievalReport,
    comparison_table,
    edge_ranks,
    retrieval_metrics,
)
from gsr_train.kg.index import get_index
from tests.oracles.retrieval_reference import reference_metrics

INF = float("-inf")
KS = [1, 2, 3, 10]


def row(qid, q_entity, a_entity, graph):
    return {
        "id": qid,
        "question": f"question {qid}?",
        "answer": list(a_entity) or ["none"],
        "q_entity": q_entity,
        "a_entity": a_entity,
        "graph": graph,
        "choices": [],
    }


def write_rows(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


TINY = [
    # q0: edges e0..e3; answers D (reachable), E (only via a -inf edge), Z (not in the graph)
    row("q0", ["A"], ["D", "E", "Z"], [["A", "r1", "B"], ["A", "r2", "C"], ["B", "r3", "D"], ["C", "r4", "E"]]),
    # q1: two topic entities, edges e4, e5
    row("q1", ["X", "Y"], ["W"], [["X", "r1", "Y"], ["Y", "r2", "W"]]),
    # q2: no answer entity, edge e6
    row("q2", ["P"], [], [["P", "r1", "Q"]]),
]
TINY_SCORES = torch.tensor([0.9, 0.5, 0.5, INF, 0.1, 0.2, 0.3])


def tiny_index(tmp_path):
    write_rows(tmp_path / "tiny" / "test.jsonl", TINY)
    return get_index(tmp_path / "tiny", splits=("test",), cache_dir=tmp_path / "cache")


def mask(n, on):
    m = torch.zeros(n, dtype=torch.bool)
    m[list(on)] = True
    return m


def close(a, b, path=""):
    """Deep comparison of report dicts with a 1e-9 tolerance on floats."""
    if isinstance(a, dict):
        assert set(a) == set(b), f"{path}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            close(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, float) or isinstance(b, float):
        assert a is not None and b is not None and abs(a - b) <= 1e-9, f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def without_intervals(d):
    """A report dict as the reference loop writes it: no meta, no intervals (overall or per group)."""
    out = {k: v for k, v in d.items() if k not in ("meta", "intervals")}
    for name in ("by_hops", "by_topics"):
        out[name] = {g: {k: v for k, v in m.items() if k != "intervals"} for g, m in out[name].items()}
    return out


def test_hand_computed_tiny_graphs(tmp_path):
    split = tiny_index(tmp_path)["test"]
    assert split.edge_ptr.tolist() == [0, 4, 6, 7]
    sp = mask(7, [0, 2, 5])  # q0: A->B->D, q1: Y->W, q2: none
    labelled = mask(7, [1, 3, 4, 6])  # q1's label is ignored: q1 is not a labelled question
    lq = torch.tensor([True, False, True])
    hops = torch.tensor([2, 1, -1])
    rep = retrieval_metrics(
        split, TINY_SCORES, KS, sp_label=sp, labelled=labelled, labelled_questions=lq, hops=hops, chunk_size=2
    )
    # ranks in q0: e0 (0.9), e1 (0.5, earlier edge wins the tie), e2 (0.5); e3 never
    assert rep.overall["sp_recall"] == pytest.approx({1: 0.75, 2: 0.75, 3: 1.0, 10: 1.0})
    assert rep.overall["labelled_recall"] == pytest.approx({1: 0.5, 2: 0.75, 3: 0.75, 10: 0.75})
    assert rep.overall["answer_recall"] == pytest.approx({1: 0.5, 2: 0.5, 3: 2 / 3, 10: 2 / 3})
    assert rep.counts == {"sp_recall": 2, "labelled_recall": 2, "answer_recall": 2}
    assert rep.questions == 3
    # per question: NaN where the question is not counted
    pq = rep.per_question["answer_recall"]
    assert pq[0].tolist() == pytest.approx([0, 0, 1 / 3, 1 / 3]) and math.isnan(pq[2, 0])
    assert math.isnan(rep.per_question["labelled_recall"][1, 0])
    # breakdowns with question counts
    assert {g: m.questions for g, m in rep.by_hops.items()} == {"1": 1, "2": 1, "no path": 1}
    assert rep.by_hops["2"].overall["sp_recall"] == pytest.approx({1: 0.5, 2: 0.5, 3: 1.0, 10: 1.0})
    assert rep.by_hops["no path"].counts == {"sp_recall": 0, "labelled_recall": 1, "answer_recall": 0}
    assert rep.by_hops["no path"].overall["sp_recall"][10] is None
    assert {g: m.questions for g, m in rep.by_topics.items()} == {"1": 2, ">=2": 1}
    assert rep.by_topics[">=2"].overall["answer_recall"] == pytest.approx({1: 1.0, 2: 1.0, 3: 1.0, 10: 1.0})
    # the reference loop agrees, and the JSON summary round-trips
    close(
        without_intervals(rep.to_dict()),
        reference_metrics(split, TINY_SCORES, KS, sp, labelled, lq, hops),
    )
    back = RetrievalReport.from_dict(json.loads(json.dumps(rep.to_dict())))
    assert back.overall == rep.overall and back.by_hops["1"].counts == rep.by_hops["1"].counts
    assert rep.flat("val/")["val/sp_recall@3"] == pytest.approx(1.0)


def test_ties_follow_edge_order_and_inf_never_counts(tmp_path):
    split = tiny_index(tmp_path)["test"]
    flat = torch.zeros(7)
    assert edge_ranks(split, flat).tolist() == [0, 1, 2, 3, 0, 1, 0]
    # equal scores: the first edges win, so K=1 in q0 covers A and B only
    rep = retrieval_metrics(split, flat, [1, 2], sp_label=mask(7, [2]))
    assert rep.overall["sp_recall"] == {1: 0.0, 2: 0.0}
    # every edge of q0 unretrieved: nothing counted even at K far beyond the graph size
    none = TINY_SCORES.clone()
    none[:4] = INF
    rep = retrieval_metrics(split, none, [1000], sp_label=mask(7, [0, 2, 5]))
    assert rep.per_question["sp_recall"][:, 0].tolist()[:2] == [0.0, 1.0]
    assert rep.per_question["answer_recall"][0, 0].item() == 0.0


def test_labelled_questions_default_and_empty_labels(tmp_path, caplog):
    split = tiny_index(tmp_path)["test"]
    labelled = mask(7, [1])
    rep = retrieval_metrics(split, TINY_SCORES, [2], labelled=labelled)
    assert rep.counts["labelled_recall"] == 1
    # a question flagged as labelled but with no labelled edge is left out and reported
    rep = retrieval_metrics(
        split, TINY_SCORES, [2], labelled=labelled, labelled_questions=torch.tensor([True, True, False])
    )
    assert rep.counts["labelled_recall"] == 1
    assert rep.meta["labelled_questions_without_edges"] == 1


def test_bad_inputs_are_named(tmp_path):
    split = tiny_index(tmp_path)["test"]
    with pytest.raises(ValueError, match="one value per edge"):
        retrieval_metrics(split, torch.zeros(6), [1])
    nan = TINY_SCORES.clone()
    nan[5] = math.nan
    with pytest.raises(ValueError, match="'q1'"):
        retrieval_metrics(split, nan, [1])
    with pytest.raises(ValueError, match="positive integers"):
        retrieval_metrics(split, TINY_SCORES, [0, 5])
    with pytest.raises(ValueError, match="hops"):
        retrieval_metrics(split, TINY_SCORES, [1], hops=torch.zeros(2, dtype=torch.long))


def random_rows(rng, n_questions):
    rows = []
    for i in range(n_questions):
        n_ent = rng.randint(1, 12)
        ents = [f"e{i}_{j}" for j in range(n_ent)]
        n_edges = rng.choice([0, 1, 3, 8, 25, 60])
        graph = [[rng.choice(ents), f"r{rng.randint(0, 4)}", rng.choice(ents)] for _ in range(n_edges)]
        answers = rng.sample(ents, rng.randint(0, min(3, n_ent))) + (["missing"] if rng.random() < 0.2 else [])
        topics = rng.sample(ents, rng.randint(1, min(2, n_ent)))
        rows.append(row(f"r{i}", topics, answers, graph))
    return rows


def test_batched_agrees_with_reference_loop_on_random_data(tmp_path, monkeypatch):
    rng = random.Random(7)
    write_rows(tmp_path / "rand" / "test.jsonl", random_rows(rng, 80))
    split = get_index(tmp_path / "rand", splits=("test",), cache_dir=tmp_path / "cache")["test"]
    g = torch.Generator().manual_seed(3)
    num_e, num_q = int(split.edge_ptr[-1]), len(split)
    scores = torch.randint(-3, 3, (num_e,), generator=g).double() * 0.5  # many ties, negatives
    scores[torch.rand(num_e, generator=g) < 0.2] = INF
    sp = torch.rand(num_e, generator=g) < 0.15
    labelled = torch.rand(num_e, generator=g) < 0.1
    lq = torch.rand(num_q, generator=g) < 0.7
    hops = torch.randint(-1, 5, (num_q,), generator=g)
    for dtype in (torch.float64, torch.float32):  # float32 + small K: the top-k path
        for ks in ([1, 2, 5, 10, 30, 100], [1, 3, 7]):
            ref = reference_metrics(split, scores.to(dtype), ks, sp, labelled, lq, hops)
            for chunk_size, max_cells, cache in ((256, 1 << 24, True), (3, 50, True), (5, 1 << 24, False)):
                # one chunk / many tiny chunks / layout rebuilt on the fly (as for huge splits)
                monkeypatch.setattr(retrieval, "CACHE_MAX_EDGES", (1 << 23) if cache else 0)
                retrieval._LAYOUTS.clear()
                rep = retrieval_metrics(
                    split, scores.to(dtype), ks, sp, labelled, lq, hops, chunk_size=chunk_size, max_cells=max_cells
                )
                close(without_intervals(rep.to_dict()), ref)
    assert set(ref["by_hops"]) == {"0", "1", "2", ">=3", "no path"}


def test_topk_key_orders_like_a_stable_sort(tmp_path):
    split = tiny_index(tmp_path)["test"]
    tricky = torch.tensor([-0.0, 0.0, -1e-40, INF, 0.0, -0.0, 3.4e38])  # signed zeros tie
    full = edge_ranks(split, tricky.double())
    assert full.tolist()[:4] == [0, 1, 2, 1 << 62] and full.tolist()[4:] == [0, 1, 0]
    for max_rank in (1, 2, 3):
        top = edge_ranks(split, tricky, max_rank=max_rank)
        expect = [r if r < max_rank else 1 << 62 for r in full.tolist()]
        assert top.tolist() == expect
    g = torch.Generator().manual_seed(0)
    noisy = torch.randn(7, generator=g).float() * torch.tensor([1e-30, 1, 1e30, 1, -1e-30, 1, 1])
    assert edge_ranks(split, noisy, max_rank=2).tolist() == [
        r if r < 2 else 1 << 62 for r in edge_ranks(split, noisy.double()).tolist()
    ]


@pytest.mark.gpu
def test_cuda_matches_cpu(tmp_path):
    from .conftest import GPU_LANE

    split = tiny_index(tmp_path)["test"]
    a = retrieval_metrics(split, TINY_SCORES, KS, sp_label=mask(7, [0, 2, 5]))
    b = retrieval_metrics(split, TINY_SCORES, KS, sp_label=mask(7, [0, 2, 5]), device=GPU_LANE)
    # averages summed in another order on the GPU may differ in the last bit (3.3e-16 seen at real size)
    assert a.overall.keys() == b.overall.keys()
    for m, per_k in a.overall.items():
        assert b.overall[m] == pytest.approx(per_k, rel=1e-12, abs=1e-15), m


def test_tables(tmp_path):
    split = tiny_index(tmp_path)["test"]
    a = retrieval_metrics(split, TINY_SCORES, KS, sp_label=mask(7, [0, 2, 5]), hops=torch.tensor([2, 1, -1]))
    b = retrieval_metrics(split, torch.zeros(7), KS, sp_label=mask(7, [0, 2, 5]))
    text = a.table("tiny", breakdowns=True)
    # each overall figure with its 95% bootstrap interval over the questions
    row = "| sp_recall | 2 | 0.7500 (0.500-1.000) | 0.7500 (0.500-1.000) | 1.0000 (1.000-1.000) | 1.0000 (1.000-1.000)"
    assert "### tiny" in text and row in text
    assert "| no path | 1 | sp_recall | 0 | - | - | - | - |" in text
    # a breakdown group's figures carry their interval too (q0, the 2-hop question, alone: no spread)
    assert "| 2 | 1 | sp_recall | 1 | 0.5000 (0.500-0.500) | 0.5000 (0.500-0.500) | 1.0000 (1.000-1.000) |" in text
    md = comparison_table({"model-a": a, "zeros": b}, ks=[1, 3], metrics=["sp_recall"])
    assert md.splitlines()[0] == "| model | sp_recall@1 | sp_recall@3 |"
    assert md.splitlines()[2] == "| model-a | 0.7500 (0.500-1.000) | 1.0000 (1.000-1.000) |"
    assert md.splitlines()[3] == "| zeros | 0.2500 (0.000-0.500) | 1.0000 (1.000-1.000) |"
    from rich.table import Table

    assert isinstance(comparison_table({"a": a}, fmt="rich"), Table)
    with pytest.raises(ValueError, match="no K"):
        comparison_table({"a": a}, ks=[7])


def _random_report(n_questions, seed=0):
    """A report of ``n_questions`` random 1-10 edge graphs, random scores and hop counts (no graphs
    built: the per-question values and groups as retrieval_metrics leaves them)."""
    gen = torch.Generator().manual_seed(seed)
    ks = [1, 5]
    values = (torch.rand(n_questions, len(ks), generator=gen) < torch.tensor([0.4, 0.8])).double()
    hops = torch.randint(-1, 4, (n_questions,), generator=gen)
    groups = retrieval.hop_groups(hops)
    rep = RetrievalReport(
        ks,
        n_questions,
        {"answer_recall": dict(zip(ks, values.mean(0).tolist()))},
        {"answer_recall": n_questions},
        per_question={"answer_recall": values},
        ids=[f"q{i}" for i in range(n_questions)],
        group_ids={"hops": groups},
    )
    for g, name in enumerate(retrieval.HOP_GROUPS):
        inside = groups == g
        if int(inside.sum()):
            overall = {"answer_recall": dict(zip(ks, values[inside].mean(0).tolist()))}
            rep.by_hops[name] = retrieval.GroupMetrics(int(inside.sum()), overall, {"answer_recall": int(inside.sum())})
    return rep


def test_breakdown_intervals_contain_the_figure_shrink_and_repeat():
    """Each hop group's recall has a 95% interval that holds the group's figure, is the same twice,
    survives to_dict / from_dict, and narrows with 16x the questions (about 4x; checked >2x)."""
    small, large = _random_report(400), _random_report(6400)
    for rep in (small, large):
        rep.intervals  # noqa: B018 (computed on first use: overall and every group)
        for name, gm in rep.by_hops.items():
            for k in rep.ks:
                low, high = gm.intervals["answer_recall"][k]
                assert low <= gm.overall["answer_recall"][k] <= high, (name, k)
                assert high > low  # hundreds of 0/1 values: a real spread
    again = _random_report(400)
    again.intervals  # noqa: B018
    assert {g: m.intervals for g, m in again.by_hops.items()} == {g: m.intervals for g, m in small.by_hops.items()}
    back = RetrievalReport.from_dict(json.loads(json.dumps(small.to_dict())))
    for k in small.ks:
        assert back.by_hops["2"].intervals["answer_recall"][k] == pytest.approx(
            small.by_hops["2"].intervals["answer_recall"][k]
        )
    for g in small.by_hops:
        w_small = small.by_hops[g].intervals["answer_recall"][1]
        w_large = large.by_hops[g].intervals["answer_recall"][1]
        assert (w_small[1] - w_small[0]) > 2 * (w_large[1] - w_large[0]), g


def test_breakdown_interval_known_answer():
    """A group of 0/1 values: its interval is the percentile bootstrap of that group's mean alone (the
    other questions never count), matched against a plain numpy bootstrap within 0.03."""
    import numpy as np

    rep = _random_report(2000, seed=3)
    rep.intervals  # noqa: B018
    values = rep.per_question["answer_recall"][:, 0].numpy()
    inside = (rep.group_ids["hops"] == 2).numpy()
    rng = np.random.default_rng(0)
    means = []
    for _ in range(2000):
        pick = rng.integers(0, len(values), len(values))
        keep = inside[pick]
        means.append(values[pick][keep].mean())
    low, high = np.percentile(means, [2.5, 97.5])
    got = rep.by_hops["2"].intervals["answer_recall"][1]
    assert got == pytest.approx((low, high), abs=0.03)


def test_hop_table_prints_each_group_interval():
    """SubgraphRAG's by-hop table (eval/comparison.hop_table): every cell ``value (low-high)``, the
    bounds those of the group's interval."""
    from gsr_train.eval.comparison import hop_table

    rep = _random_report(400)
    text = hop_table({"model": rep}, [1, 5], metrics=["answer_recall"])
    low, high = rep.by_hops["2"].intervals["answer_recall"][5]
    value = rep.by_hops["2"].overall["answer_recall"][5]
    line = next(x for x in text.splitlines() if x.startswith("| 2 |"))
    assert line.endswith(f"| {value:.3f} ({low:.2f}-{high:.2f}) |"), line


def test_compare_patterns_table_prints_each_recall_interval(tmp_path):
    """gsr-train compare-patterns' rows (SimGRAG / SAFE beside the triple retrievers) carry the 95%
    interval of each answer recall, and its table prints them."""
    from gsr_train.runs.compare_patterns import _recall, markdown

    split = tiny_index(tmp_path)["test"]
    rec, bounds = _recall(split, TINY_SCORES, [1, 3], None)
    rep = retrieval_metrics(split, TINY_SCORES, [1, 3])
    assert rec == {"1": rep.overall["answer_recall"][1], "3": rep.overall["answer_recall"][3]}
    assert bounds["1"] == list(rep.intervals["answer_recall"][1])
    row = {"method": "SAFE", "answer_recall": rec, "intervals": {"answer_recall": bounds}, "triples": 2.0}
    text = markdown([{**row, "ms_per_question": None}], [1, 3], "tiny")
    low, high = bounds["1"]
    assert f"| SAFE | {rec['1']:.3f} ({low:.2f}-{high:.2f}) |" in text
