"""Bootstrap intervals over questions, the paired comparison of two runs, and means over seeds."""

from __future__ import annotations

import json
import math
import random
import time

import numpy as np
import pytest

from gsr_train.eval.intervals import QuestionValues, format_estimate, paired_difference, seed_summary
from gsr_train.eval.qa import QAExample, qa_metrics


def _hits(n: int, p: float, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < p).astype(float)


def test_interval_of_a_hit_rate_is_the_binomial_one_and_seeded():
    values = QuestionValues([f"q{i}" for i in range(400)]).add_mean("hit", _hits(400, 0.7, 0))
    (low, high) = values.intervals()["hit"]
    mean = values.values()["hit"]
    half = 1.96 * math.sqrt(mean * (1 - mean) / 400)  # the normal approximation: about +-0.045
    assert low < mean < high and high - low == pytest.approx(2 * half, rel=0.15)
    assert values.intervals() == values.intervals()  # seeded: the same every time
    assert values.intervals(seed=1)["hit"] != (low, high)


def test_questions_with_nothing_to_find_are_not_counted():
    v = np.array([1.0, 0.0, math.nan, 1.0, math.nan])
    values = QuestionValues(list("abcde")).add_mean("recall", v)
    assert values.values()["recall"] == pytest.approx(2 / 3)
    low, high = values.intervals()["recall"]
    assert 0.0 <= low <= 2 / 3 <= high <= 1.0
    only_nan = QuestionValues(["a"]).add_mean("recall", [math.nan])
    assert only_nan.values()["recall"] is None and only_nan.intervals()["recall"] is None


def test_qa_intervals_cover_micro_f1_and_score_h():
    examples = [
        QAExample(f"q{i}", ["Paris"] if i % 3 else ["Rome", "Paris"], ["Paris"], "", in_kg=i % 4 != 0)
        for i in range(60)
    ]
    rep = qa_metrics(examples)
    values = rep.question_values()
    for name, figure in rep.flat().items():  # the per-question parts give back every figure
        assert values.values()[name] == pytest.approx(figure), name
    bounds = rep.to_dict()["all"]["intervals"]
    assert set(bounds) == set(rep.flat())
    for name, (low, high) in bounds.items():
        assert low <= rep.flat()[name] + 1e-9 and rep.flat()[name] <= high + 1e-9, name
    assert "(" in rep.table() and "-" in rep.table()


def test_paired_difference_of_the_same_run_is_zero_and_of_a_better_one_is_significant():
    ids = [f"q{i}" for i in range(300)]
    a = QuestionValues(ids).add_mean("hit", _hits(300, 0.6, 0))
    same = paired_difference(a, a)
    assert same[0].diff == 0.0 and same[0].p_value == 1.0 and same[0].low == same[0].high == 0.0
    better_hits = np.maximum(_hits(300, 0.6, 0), _hits(300, 0.5, 1))  # a hit wherever a had one, and more
    b = QuestionValues(list(reversed(ids))).add_mean("hit", better_hits[::-1])  # another order: paired by id
    (d,) = paired_difference(b, a)
    assert d.diff == pytest.approx(better_hits.mean() - _hits(300, 0.6, 0).mean())
    assert d.low > 0 and d.p_value < 0.01 and d.questions == 300
    noise = QuestionValues(ids).add_mean("hit", _hits(300, 0.6, 2))
    (n,) = paired_difference(noise, a)
    assert n.low < 0 < n.high and n.p_value > 0.05


def test_paired_difference_uses_the_shared_questions_only():
    a = QuestionValues(["x", "y", "z"]).add_mean("hit", [1.0, 0.0, 1.0])
    b = QuestionValues(["z", "y", "w"]).add_mean("hit", [0.0, 0.0, 1.0]).add_mean("other", [1, 1, 1])
    (d,) = paired_difference(a, b)
    assert (d.metric, d.questions, d.a, d.b, d.diff) == ("hit", 2, 0.5, 0.0, 0.5)


def test_bootstrap_is_fast_on_35k_questions():
    n = 35_000
    values = QuestionValues([str(i) for i in range(n)])
    for m in range(20):
        values.add_mean(f"m{m}", _hits(n, 0.5, m))
    t0 = time.perf_counter()
    values.intervals()
    paired_difference(values, values)
    assert time.perf_counter() - t0 < 15  # about 2 s on one core


def test_round_trip_and_formatting():
    values = QuestionValues(["a", "b"]).add_mean("hit", [1.0, math.nan]).add_ratio("s", [1, 2], [2, 2])
    values.add_f1("micro", [1, 0], [2, 1], [1, 0], [1, 1])
    back = QuestionValues.from_json(json.loads(json.dumps(values.to_json())))
    assert back.values() == values.values() and back.ids == ["a", "b"]
    assert format_estimate(0.7661, 0.72, 0.81) == "0.766 (0.72-0.81)"
    assert format_estimate(-0.03, -0.08, 0.02) == "-0.030 (-0.08 to 0.02)"
    assert format_estimate(None, None, None) == "-" and format_estimate(0.5, None, None) == "0.500"


def test_seed_summary_is_the_t_interval_of_the_mean():
    s = seed_summary([0.70, 0.72, 0.74])
    assert s["mean"] == pytest.approx(0.72) and s["std"] == pytest.approx(0.02)
    assert s["high"] - s["mean"] == pytest.approx(4.303 * 0.02 / math.sqrt(3))
    assert seed_summary([0.5])["std"] is None and seed_summary([])["mean"] is None
    near_one = seed_summary([0.99, 1.0, 0.95])  # a recall over seeds: its interval stays a share
    assert near_one["high"] == 1.0 and 0.0 < near_one["low"] < near_one["mean"]
    loss = seed_summary([0.99, 1.0, 1.4])  # not a share: the t interval as it is
    assert loss["high"] > 1.0


def test_chain_match_values_give_chain_match_and_its_intervals():
    from gsr_train.eval.chains import chain_match, chain_match_values

    beams = [[("r1",), ("r2",)], [("r9",), ("r3", "r4")], [None], [("r1",)]]
    ground = [[("r1",)], [("r3", "r4")], [("r5",)], []]  # the last has no ground chain: not counted
    figures = chain_match(beams, ground, [1, 2])
    values = chain_match_values(["a", "b", "c", "d"], beams, ground, [1, 2])
    assert values.values() == {"match@1": figures["match@1"], "match@2": figures["match@2"]}
    low, high = values.intervals()["match@2"]
    assert low <= 2 / 3 <= high


def test_format_cell_is_the_one_cell_writer():
    """Every table's cell: a figure with its [low, high] as metrics.json keeps it; counts and labels as
    they are; no figure '-'; a scale for percentages."""
    from gsr_train.eval.intervals import format_cell

    assert format_cell(0.766, [0.7213, 0.8101]) == "0.766 (0.72-0.81)"
    assert format_cell(0.766, (0.7213, 0.8101), 4) == "0.7660 (0.721-0.810)"
    assert format_cell(0.766, None) == "0.766"
    assert format_cell(0.766, [0.72, 0.81], 2, 100) == "76.60 (72.0-81.0)"
    assert format_cell(None, [0.1, 0.2]) == "-"
    assert format_cell(232, None) == "232" and format_cell("swap", None) == "swap" and format_cell(True) == "True"


def test_chain_group_and_coverage_values_are_the_reported_figures():
    """The per-question parts behind GSR's seen / unseen match, answer coverage and the paper's
    coverage give back exactly the figures the chain report prints (so their intervals are of those
    figures), and each interval holds its figure."""
    from gsr_train.eval import chains

    rng = random.Random(0)
    rels = ["a", "b", "c", "d"]
    beams, ground, ents, ends, answers = [], [], [], [], []
    for i in range(120):
        ground.append([(rng.choice(rels), rng.choice(rels))] if i % 7 else [])
        beams.append([(rng.choice(rels), rng.choice(rels)) for _ in range(3)])
        answers.append([f"e{rng.randrange(6)}" for _ in range(rng.randrange(0, 3))])
        ents.append({f"e{rng.randrange(6)}" for _ in range(rng.randrange(0, 4))})
        ends.append({f"e{rng.randrange(6)}" for _ in range(rng.randrange(0, 3))})
    ids = [f"q{i}" for i in range(120)]
    groups = {"seen": list(range(0, 120, 2)), "unseen": list(range(1, 120, 2))}
    values = chains.chain_match_values(ids, beams, ground, (1, 3))
    has = [i for i in range(120) if i % 5]  # questions with a graph
    values = chains.coverage_values(
        chains.group_match_values(values, groups),
        has,
        [ents[i] for i in has],
        [ends[i] for i in has],
        [answers[i] for i in has],
    )
    got, bounds = values.values(), values.intervals()
    for name, rows in groups.items():
        want = chains.chain_match([beams[i] for i in rows], [ground[i] for i in rows], (1, 3))
        assert got[f"{name}_match@1"] == pytest.approx(want["match@1"])
        assert got[f"{name}_match@3"] == pytest.approx(want["match@3"])
    cov = chains.answer_coverage([ents[i] for i in has], [answers[i] for i in has])
    paper = chains.paper_coverage([ends[i] for i in has], [answers[i] for i in has])
    for key in ("precision", "recall", "f1", "hits"):
        assert got[f"cov_{key}"] == pytest.approx(cov[key]) and got[f"paper_{key}"] == pytest.approx(paper[key])
    assert got["paper_macro_f1"] == pytest.approx(paper["macro_f1"])
    for name, v in got.items():
        assert bounds[name][0] <= v <= bounds[name][1], name


def test_a_node_scorers_answer_ranking_carries_intervals():
    """metrics.json's answer_ranking (a GNN's own top answer per question): every figure of every view
    with its 95% interval, holding the figure; the printed table shows them."""
    from gsr_train.eval.retrieval_report import answer_ranking

    rng = random.Random(1)
    n = 200
    gold = [[f"a{i}"] for i in range(n)]
    ranked = [[{"name": f"a{i}" if rng.random() < 0.6 else f"x{i}", "prob": 0.9}] for i in range(n)]
    graphs = type("G", (), {"ids": [f"q{i}" for i in range(n)], "answers": gold, "__len__": lambda self: n})()
    report = answer_ranking(graphs, ranked)
    view = report.to_dict()["all"]
    hit1 = view["metrics"]["hit@1"]
    low, high = view["intervals"]["hit@1"]
    assert low < hit1 < high and 0.05 < high - low < 0.2  # 200 questions near 0.6: about +-0.07
    assert f"{100 * hit1:.2f} ({100 * low:.1f}-{100 * high:.1f})" in report.table()


def test_a_node_scorers_first_answer_is_on_its_row_and_compared(tmp_path):
    """The GNN's top-answer hit sits on its retrieval row (top_answer_hit@1, with the interval the
    answer ranking gives) and its per-question values pair in gsr-train compare."""
    from gsr_train.eval.compare import compare_runs
    from gsr_train.eval.retrieval_report import answer_ranking, top_answer_values
    from gsr_train.eval.tail import add_intervals, metrics_row, write_metrics

    n = 120
    gold = [[f"a{i}"] for i in range(n)]
    graphs = type("G", (), {"ids": [f"q{i}" for i in range(n)], "answers": gold, "__len__": lambda self: n})()
    runs = []
    for name, p in (("a", 0.8), ("b", 0.5)):
        rng = random.Random(len(name) + int(10 * p))
        ranked = [[{"name": f"a{i}" if rng.random() < p else f"x{i}", "prob": 0.9}] for i in range(n)]
        report = answer_ranking(graphs, ranked)
        row = metrics_row("GNNRAG", "test", 30, {"top_answer_hit@1": report.flat()["hit@1"]})
        add_intervals(row, top_answer_values(report))
        assert row["intervals"]["top_answer_hit@1"] == report.to_dict()["all"]["intervals"]["hit@1"]
        folder = tmp_path / name
        folder.mkdir()
        write_metrics(folder, "x", "toy", "f" * 16, [row])
        runs.append(folder)
    doc = compare_runs(*runs)
    (pair,) = [m for r in doc["rows"] for m in r["metrics"] if m["metric"] == "top_answer_hit@1"]
    assert pair["questions"] == n and pair["low"] < pair["diff"] < pair["high"] and pair["diff"] > 0
