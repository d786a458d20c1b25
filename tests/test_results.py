import gzip
import json

import pytest
import torch

from gsr_train.commands import recall as evaluate_mod
from gsr_train.eval.labels import load_labelled_triples
from gsr_train.eval.results import (
    EdgeMatcher,
    MatchStats,
    TripleFileError,
    _pack,
    read_results,
    write_results,
)
from gsr_train.eval.retrieval import retrieval_metrics
from gsr_train.kg.index import get_index

from .test_retrieval_metrics import INF, TINY_SCORES, tiny_index

INFO = float("inf")


def read_jsonl(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f]


def write_lines(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def test_write_read_round_trip(tmp_path):
    index = tiny_index(tmp_path)
    out = tmp_path / "res" / "test.jsonl.gz"
    chains = [[{"topic": index.entities.index("A"), "chain": [0, 1], "score": 0.5}], [], []]
    n = write_results(out, index, "test", TINY_SCORES, k=2, chains=chains, extra={"note": ["a", "b", "c"]})
    assert n == 3
    rows = read_jsonl(out)
    assert [r["id"] for r in rows] == ["q0", "q1", "q2"]
    assert rows[0]["triples"] == [["A", "r1", "B"], ["A", "r2", "C"]]  # tie e1/e2 -> e1 (edge order)
    assert rows[0]["scores"] == pytest.approx([0.9, 0.5])
    assert rows[1]["triples"] == [["Y", "r2", "W"], ["X", "r1", "Y"]]
    assert rows[0]["chains"] == [{"topic": "A", "chain": ["r1", "r2"], "score": 0.5}]
    assert rows[2]["note"] == "c"
    stats = MatchStats()
    scores, back_chains = read_results(out, index, "test", stats=stats)
    assert scores.tolist() == [0.0, -1.0, INF, INF, -1.0, 0.0, 0.0]
    assert back_chains[0][0]["chain"] == ["r1", "r2"] and back_chains[1] == []
    assert stats.rows == 3 and stats.matched == 5 and stats.missing_questions == 0
    # metrics at K <= k are those of the original scores
    sp = torch.tensor([1, 0, 1, 0, 0, 1, 0], dtype=torch.bool)
    a = retrieval_metrics(index["test"], TINY_SCORES, [1, 2], sp_label=sp)
    b = retrieval_metrics(index["test"], scores, [1, 2], sp_label=sp)
    assert a.overall == b.overall and a.overall["answer_recall"][1] == 0.5


@pytest.fixture(scope="module")
def real_index(webqsp_mini, tmp_path_factory):
    return get_index(webqsp_mini, splits=("test",), cache_dir=tmp_path_factory.mktemp("cache"))


def test_round_trip_on_real_graphs(real_index, tmp_path):
    index = real_index
    split = index["test"]
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 50, (int(split.edge_ptr[-1]),), generator=g).float()  # many ties
    scores[torch.rand(scores.shape, generator=g) < 0.3] = INF
    out = tmp_path / "real.jsonl"
    write_results(out, index, "test", scores, k=50)
    rows = read_jsonl(out)
    assert len(rows) == len(split) and max(len(r["triples"]) for r in rows) == 50
    assert all(r["scores"] == sorted(r["scores"], reverse=True) for r in rows)
    back, _ = read_results(out, index, "test")
    ks = [1, 10, 20, 50]
    assert retrieval_metrics(split, scores, ks).overall == retrieval_metrics(split, back, ks).overall
    assert int((back > INF).sum()) == sum(len(r["triples"]) for r in rows)


def test_bad_results_are_named_or_counted(tmp_path, caplog):
    index = tiny_index(tmp_path)
    path = tmp_path / "bad.jsonl"
    good = {"id": "q0", "triples": [["A", "r1", "B"]], "scores": [1.0]}
    write_lines(path, [good, {"id": "nope", "triples": [], "scores": []}])
    with pytest.raises(TripleFileError, match=r"bad\.jsonl: line 2: id 'nope'"):
        read_results(path, index, "test")
    write_lines(path, [good, {"id": "q1", "triples": [["Y", "r2", "W"], ["A", "r1", "B"]], "scores": [2, 1]}])
    with pytest.raises(TripleFileError, match=r"line 2 \(id 'q1'\): triple \['A', 'r1', 'B'\] is not in"):
        read_results(path, index, "test")  # A-r1-B exists, but in q0's graph, not q1's
    write_lines(
        path,
        [good, {"id": "q1", "triples": [["Y", "r2", "W"], ["Y", "unknown.rel", "W"]]}, {"id": "zz", "triples": []}],
    )
    stats = MatchStats()
    scores, _ = read_results(path, index, "test", skip_unknown=True, stats=stats)
    assert (stats.unknown_ids, stats.unmatched_triples, stats.missing_questions) == (1, 1, 1)
    assert scores.tolist() == [0.0, INF, INF, INF, INF, 0.0, INF]  # q2 missing: retrieves nothing
    assert any("missing" in r.message for r in caplog.records)
    for bad, message in (
        ([good, good], "duplicate id"),
        (["{not json"], "line 1: not valid JSON"),
        ([{"id": "q0", "triples": [["A", "r1"]]}], "'triples' must be"),
        ([{"id": "q0", "triples": [["A", "r1", "B"]], "scores": [1, 2]}], "'scores' must be 1 numbers"),
    ):
        write_lines(path, bad)
        with pytest.raises(TripleFileError, match=message):
            read_results(path, index, "test")


def test_rows_rank_by_score_with_file_order_for_ties_and_reject_non_finite(tmp_path):
    index = tiny_index(tmp_path)
    path = tmp_path / "unsorted.jsonl"
    ab, ac = ["A", "r1", "B"], ["A", "r2", "C"]
    write_lines(path, [{"id": "q0", "triples": [ac, ab], "scores": [0.1, 0.9]}])  # written worst first
    scores, _ = read_results(path, index, "test")
    assert scores[:2].tolist() == [0.0, -1.0]  # A-r1-B (0.9) ranks first, not the file's first line
    write_lines(path, [{"id": "q0", "triples": [ac, ab], "scores": [0.5, 0.5]}])
    scores, _ = read_results(path, index, "test")
    assert scores[:2].tolist() == [-1.0, 0.0]  # a tie keeps file order: the earlier line ranks higher
    write_lines(path, [{"id": "q0", "triples": [ac, ab]}])
    scores, _ = read_results(path, index, "test")
    assert scores[:2].tolist() == [-1.0, 0.0]  # no scores: file order
    for bad in ("NaN", "Infinity", "-Infinity"):
        path.write_text(f'{{"id": "q1", "triples": [["Y", "r2", "W"]], "scores": [{bad}]}}\n')
        with pytest.raises(TripleFileError, match=r"line 1 \(id 'q1'\): 'scores' must be finite: triple #0"):
            read_results(path, index, "test")


def test_write_rejects_bad_input(tmp_path):
    index = tiny_index(tmp_path)
    with pytest.raises(ValueError, match="k must be"):
        write_results(tmp_path / "x.jsonl", index, "test", TINY_SCORES, k=0)
    with pytest.raises(ValueError, match=r"\+inf"):
        write_results(tmp_path / "x.jsonl", index, "test", torch.full((7,), INFO), k=1)
    with pytest.raises(ValueError, match="clashes"):
        write_results(tmp_path / "x.jsonl", index, "test", TINY_SCORES, k=1, extra={"scores": [1, 2, 3]})
    assert not (tmp_path / "x.jsonl").exists()


def test_labels_error_and_skip(tmp_path):
    index = tiny_index(tmp_path)
    path = tmp_path / "labels.jsonl.gz"
    rows = [
        {"id": "q0", "triples": [["A", "r2", "C"], ["C", "r4", "E"], ["C", "r4", "E"]]},
        {"id": "q1", "triples": []},
        {"id": "q2", "triples": [["P", "r1", "Nowhere"]]},
    ]
    with gzip.open(path, "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TripleFileError, match=r"labels\.jsonl\.gz: line 3 \(id 'q2'\): triple"):
        load_labelled_triples(path, index, "test")
    labelled, lq, stats = load_labelled_triples(path, index, "test", skip_unknown=True)
    assert labelled.tolist() == [False, True, False, True, False, False, False]
    assert lq.tolist() == [True, False, False]  # q1: empty list; q2: its only label was dropped
    assert stats["unmatched_triples"] == 1 and stats["questions_without_matched_labels"] == 1
    assert stats["rows_without_labels"] == 1 and stats["duplicate_triples"] == 1


def test_real_gpt_labels(real_index, webqsp_mini):
    index = real_index
    labelled, lq, stats = load_labelled_triples(webqsp_mini / "gpt_triples_test.jsonl.gz", index, "test")
    assert int(lq.sum()) == 208 == stats["rows_with_labels"]  # as documented in the fixture README
    assert stats["unmatched_triples"] == 0 and stats["matched"] == stats["triples"]
    # spot check one question against its string triples
    q = index["test"].position()["WebQTest-9"]
    e0, e1 = index["test"].edge_ptr[q : q + 2].tolist()
    got = {tuple(t) for t, on in zip(index.triple_strings("test", q), labelled[e0:e1].tolist()) if on}
    assert ("Pat Nixon", "people.person.spouse_s", "m.02h98gq") in got and len(got) == 4


def test_pack_compresses_instead_of_overflowing():
    a = torch.tensor([5, 5, 7, 1 << 40])
    b = torch.tensor([3, 3, 3, 9])
    c = torch.tensor([1, 2, 1, 1])
    keys = _pack([a, b, c], [1 << 41, 1 << 41, 1 << 41])  # product far beyond int64
    assert keys.unique().numel() == 4
    assert keys[0] != keys[1] and bool((keys >= 0).all())
    same = _pack([torch.tensor([3, 3]), torch.tensor([4, 4]), torch.tensor([9, 9])], [1 << 41] * 3)
    assert same[0] == same[1]


def test_matcher_distinguishes_questions(tmp_path):
    index = tiny_index(tmp_path)
    m = EdgeMatcher(index, "test")
    got = m.match(
        torch.tensor([0, 1, 0, 2, 1]),
        [["B", "r3", "D"], ["B", "r3", "D"], ["B", "r1", "D"], ["P", "r1", "Q"], ["Y", "r2", "W"]],
    )
    assert got.tolist() == [2, -1, -1, 6, 5]
    # an unknown name, a name that is not a string (a malformed row's), a null: no edge, no error
    odd = m.match(
        torch.tensor([0, 0, 0, 0]), [["B", "r3", "nowhere"], [7, "r3", "D"], ["B", None, "D"], ["B", "r3", "D"]]
    )
    assert odd.tolist() == [-1, -1, -1, 2]


def test_evaluate_command(tmp_path, capsys):
    index = tiny_index(tmp_path)
    res = tmp_path / "res.jsonl"
    write_results(res, index, "test", TINY_SCORES, k=3)
    labels = tmp_path / "labels.jsonl"
    write_lines(labels, [{"id": "q0", "triples": [["A", "r2", "C"]]}])
    out = tmp_path / "m" / "metrics.json"
    code = evaluate_mod.main(
        [
            "--results",
            str(res),
            "--data",
            str(tmp_path / "tiny"),
            "--labels",
            str(labels),
            "--ks",
            "1,3",
            "--out",
            str(out),
            "--cache",
            str(tmp_path / "cache"),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "| labelled_recall | 1 | 0.0000 (0.000-0.000) | 1.0000 (1.000-1.000) |" in printed
    metrics = json.loads(out.read_text())
    assert metrics["ks"] == [1, 3] and metrics["meta"]["results_stats"]["matched"] == 6
    # the same numbers as the metrics computed directly from the supervision
    from gsr_train.kg.paths import get_supervision

    sup = get_supervision(index, "test", tmp_path / "cache")
    direct = retrieval_metrics(index["test"], TINY_SCORES, [1, 3], sp_label=sup.triple_label, hops=sup.hops)
    assert metrics["overall"]["sp_recall"] == {str(k): v for k, v in direct.overall["sp_recall"].items()}
    assert metrics["counts"]["answer_recall"] == 2 and metrics["overall"]["answer_recall"]["1"] == 0.5
    # a file that does not fit the split: a clear error, exit code 2
    write_lines(res, [{"id": "q9", "triples": []}])
    assert (
        evaluate_mod.main(["--results", str(res), "--data", str(tmp_path / "tiny"), "--cache", str(tmp_path / "cache")])
        == 2
    )
    assert "id 'q9' is not in the split" in capsys.readouterr().err


def test_evaluate_command_names_its_flag_and_prints_what_it_skipped(tmp_path, capsys):
    """The command's errors name ``--skip_unknown`` (the flag typed), not the keyword ``skip_unknown``;
    with it, what was skipped, dropped or missing is one line on the screen (not only in the JSON)."""
    index = tiny_index(tmp_path)
    res = tmp_path / "res.jsonl"
    good = {"id": "q0", "triples": [["A", "r1", "B"], ["A", "r1", "B"]]}  # a duplicate triple
    args = ["--results", str(res), "--data", str(tmp_path / "tiny"), "--cache", str(tmp_path / "cache")]
    for rows, says in (
        ([good, {"id": "nope", "triples": []}], "id 'nope' is not in the split (pass --skip_unknown to count"),
        ([good, {"id": "q1", "triples": [["Y", "no.rel", "W"]]}], "(1 such triples in the file; pass --skip_unknown "),
    ):
        write_lines(res, rows)
        assert evaluate_mod.main(args) == 2
        err = capsys.readouterr().err
        assert says in err and " skip_unknown" not in err  # the flag as typed, --skip_unknown
    write_lines(res, [good, {"id": "q1", "triples": [["Y", "no.rel", "W"]]}, {"id": "nope", "triples": []}])
    assert evaluate_mod.main([*args, "--skip_unknown"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        "res.jsonl: 2 rows; 1 ids not in the split skipped, 1 triples not in their question's graph skipped, "
        f"1 duplicate triples (each counted once), {len(index['test']) - 2} split questions without a row "
        "(retrieve nothing)"
    )
    write_results(res, index, "test", TINY_SCORES, k=3)
    assert evaluate_mod.main(args) == 0
    assert not capsys.readouterr().out.splitlines()[-1].startswith("res.jsonl:")  # nothing to say: no line


@pytest.mark.parametrize(
    "results, labels, says",
    [
        ([{"id": "q0", "triples": [["A", "r1"]]}], None, "res.jsonl: line 1"),
        ([{"id": "q0", "triples": [], "scores": [1.0]}], None, "'scores' must be 0 numbers"),
        ([{"id": "q0", "triples": []}], [{"triples": []}], "labels.jsonl: line 1"),
    ],
)
def test_recall_refuses_a_malformed_file_before_it_builds_the_index(tmp_path, capsys, results, labels, says):
    """The results and labels files are read for form first: a bad row is one line before the KG
    index is built or loaded (minutes on a first run at real size), and nothing is cached."""
    tiny_index(tmp_path)
    write_lines(tmp_path / "res.jsonl", results)
    args = [
        "--results",
        str(tmp_path / "res.jsonl"),
        "--data",
        str(tmp_path / "tiny"),
        "--cache",
        str(tmp_path / "new"),
    ]
    if labels is not None:
        write_lines(tmp_path / "labels.jsonl", labels)
        args += ["--labels", str(tmp_path / "labels.jsonl")]
    assert evaluate_mod.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: gsr-train recall: ") and says in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "new").exists()  # no index built, no supervision computed
