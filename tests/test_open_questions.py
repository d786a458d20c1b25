"""Open-ended question sources (OKGQA): OKGQA's CSV, question JSONL files, the embedded set,
the templates and the LLM step (scripted server, real fixture), with their errors."""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gsr_train.data.open_questions import (
    QUESTION_TYPES,
    GraphEntities,
    OpenQuestion,
    OpenQuestionError,
    assign_types,
    load_okgqa_csv,
    read_questions,
    template_questions,
)
from gsr_train.llm.server import ScriptedBackend, serve_in_thread
from gsr_train.llm.steps import open_questions as step
from gsr_train.openended.questions import EMBEDDED, load_questions, questions_from_index

from .test_llm_steps import _llm

REPO = Path(__file__).resolve().parents[1]

# OKGQA's OKG/filtered_questions_v3.csv: a pandas index column, Python dict reprs in the entity cells
OKGQA_HEADER = ["", "question", "type", "placeholders", "naturalness", "difficulty", "dbpedia_entities", "id"]
OKGQA_HEADER += ["dbpedia_entities_re"]


def _okgqa_row(k: int, question: str, qtype: str, entities: dict[str, str], difficulty: str = "medium") -> list:
    urls = {slot: f"http://dbpedia.org/resource/{name}" for slot, name in entities.items()}
    places = {slot: name.replace("_", " ") for slot, name in entities.items()}
    return [k, question, qtype, repr(places), "high", difficulty, repr(urls), k, repr(entities)]


OKGQA_ROWS = [
    _okgqa_row(
        0, "Please describe Marie Curie's contributions to chemistry.", "descriptive", {"person": "Marie_Curie"}
    ),
    _okgqa_row(
        1,
        "Compare and contrast the economic policies of Ronald Reagan and Margaret Thatcher.",
        "comparative",
        {"entity A": "Ronald_Reagan", "entity B": "Margaret_Thatcher"},
        "hard",
    ),
    _okgqa_row(
        2,
        "How do you evaluate the impact of the Internet on modern education? Please explain your viewpoint.",
        "Critical",
        {"event": "Internet", "field": "Education"},
    ),
]


def _write_csv(path: Path, header: list, rows: list[list]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_okgqa_csv_in_its_published_layout(tmp_path):
    path = _write_csv(tmp_path / "filtered_questions_v3.csv", OKGQA_HEADER, OKGQA_ROWS)
    qs = load_okgqa_csv(path)
    assert [q.id for q in qs] == [q.graph_id for q in qs] == ["0", "1", "2"]
    assert [q.type for q in qs] == ["descriptive", "comparative", "critical"]
    assert [q.entities for q in qs] == [
        ["Marie_Curie"],
        ["Ronald_Reagan", "Margaret_Thatcher"],
        ["Internet", "Education"],
    ]
    assert [q.difficulty for q in qs] == ["medium", "hard", "medium"] and {q.naturalness for q in qs} == {"high"}
    assert {q.source for q in qs} == {"okgqa"} and qs[0].question.startswith("Please describe Marie Curie")
    # the same through load_questions, with the data's graph ids
    again, counts = load_questions(path, known_graph_ids=["0", "1", "2", "3"])
    assert (
        again == qs
        and counts["questions"] == 3
        and counts["by_type"] == {t: 1 for t in ("descriptive", "comparative", "critical")}
    )

    # without an id column: the 0-based row number; URLs, JSON lists and ";" lists of names
    rows = [
        ["Why did Gandhi lead the Salt March?", "explanatory", '["Mahatma_Gandhi", "Salt_March"]'],
        ["Describe Ada Lovelace.", "descriptive", "Ada_Lovelace; Charles_Babbage"],
        ["Compare A and B.", "comparative", "http://dbpedia.org/resource/A,http://dbpedia.org/resource/B"],
    ]
    path = _write_csv(tmp_path / "plain.csv", ["question", "type", "entities"], rows)
    qs = load_okgqa_csv(path)
    assert [q.graph_id for q in qs] == ["0", "1", "2"]
    assert [q.entities for q in qs] == [
        ["Mahatma_Gandhi", "Salt_March"],
        ["Ada_Lovelace", "Charles_Babbage"],
        ["A", "B"],
    ]
    assert qs[0].naturalness is None and qs[0].difficulty is None


def test_okgqa_csv_errors(tmp_path):
    missing = _write_csv(tmp_path / "missing.csv", ["question", "kind", "naturalness"], [["q?", "critical", "high"]])
    with pytest.raises(OpenQuestionError) as e:
        load_okgqa_csv(missing)
    msg = str(e.value)
    assert "missing column(s): type, an entity column (entities / " in msg
    assert "columns found: 'question', 'kind', 'naturalness'" in msg

    bad_cell = [*OKGQA_ROWS[:2], [*OKGQA_ROWS[2][:8], "{'event': 'Internet'"]]  # unclosed dict
    with pytest.raises(OpenQuestionError, match=r"bad\.csv: line 4: field 'dbpedia_entities_re': not a list or dict"):
        load_okgqa_csv(_write_csv(tmp_path / "bad.csv", OKGQA_HEADER, bad_cell))
    not_names = [*OKGQA_ROWS[:1], [*OKGQA_ROWS[1][:8], "{'entity A': 3}"]]
    with pytest.raises(OpenQuestionError, match=r"line 3: field 'dbpedia_entities_re': expected entity names, found 3"):
        load_okgqa_csv(_write_csv(tmp_path / "num.csv", OKGQA_HEADER, not_names))

    duplicate = [*OKGQA_ROWS, [*OKGQA_ROWS[0][:7], 1, OKGQA_ROWS[0][8]]]
    with pytest.raises(OpenQuestionError, match=r"dup\.csv: line 5: field 'id': duplicate id '1' \(first on line 3\)"):
        load_okgqa_csv(_write_csv(tmp_path / "dup.csv", OKGQA_HEADER, duplicate))
    unknown_type = [*OKGQA_ROWS[:1], [OKGQA_ROWS[1][0], "Q?", "speculative", *OKGQA_ROWS[1][3:]]]
    with pytest.raises(OpenQuestionError, match=r"line 3: field 'type': unknown category 'speculative'"):
        load_okgqa_csv(_write_csv(tmp_path / "type.csv", OKGQA_HEADER, unknown_type))
    short = [*OKGQA_ROWS[:1], OKGQA_ROWS[1][:5]]
    with pytest.raises(OpenQuestionError, match=r"short\.csv: line 3: 5 cells for 9 columns"):
        load_okgqa_csv(_write_csv(tmp_path / "short.csv", OKGQA_HEADER, short))

    good = _write_csv(tmp_path / "good.csv", OKGQA_HEADER, OKGQA_ROWS)
    with pytest.raises(ValueError, match=r"2 of 3 questions are about graphs not in the data \(graph_id '1', '2'\)"):
        load_questions(good, known_graph_ids=["0"])
    kept, counts = load_questions(good, known_graph_ids=["0"], skip_unknown=True)
    assert [q.id for q in kept] == ["0"] and counts["skipped_unknown_graph"] == 2 and counts["questions_read"] == 3
    with pytest.raises(ValueError, match="no question about a graph of the data"):
        load_questions(good, known_graph_ids=["nowhere"], skip_unknown=True)
    with pytest.raises(FileNotFoundError, match="nowhere.csv"):
        load_questions(tmp_path / "nowhere.csv")


GOOD = {
    "id": "q1",
    "graph_id": "g1",
    "question": "Why is Ohio significant?",
    "type": "explanatory",
    "entities": ["Ohio"],
    "naturalness": None,
    "difficulty": None,
    "source": "template",
}


@pytest.mark.parametrize(
    "bad, expected",
    [
        ({k: v for k, v in GOOD.items() if k != "graph_id"}, "field 'graph_id': missing"),
        ({**GOOD, "question": "  "}, "field 'question': empty"),
        ({**GOOD, "question": 3}, "field 'question': expected a string, got int"),
        ({**GOOD, "entities": "Ohio"}, "field 'entities': expected a list of non-empty names"),
        ({**GOOD, "entities": []}, "field 'entities': empty"),
        ({**GOOD, "type": "musing"}, "field 'type': unknown category 'musing'"),
        ({**GOOD, "source": "human"}, "field 'source': 'human' is not one of template, llm, okgqa"),
        ({**GOOD, "difficulty": 2}, "field 'difficulty': expected a string or null, got int"),
        ({**GOOD, "id": "q0"}, "field 'id': duplicate id 'q0' (first on line 1)"),
        ("not json", "not valid JSON"),
        ([1, 2], "expected a JSON object, got list"),
    ],
)
def test_question_file_errors_name_line_and_field(tmp_path, bad, expected):
    path = tmp_path / "questions.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({**GOOD, "id": "q0"}) + "\n\n")  # a blank line keeps the numbering
        f.write((bad if isinstance(bad, str) else json.dumps(bad)) + "\n")
    with pytest.raises(OpenQuestionError) as e:
        read_questions(path)
    assert str(e.value).startswith(f"{path}: line 3: ") and expected in str(e.value)
    path.write_bytes(gzip.compress((json.dumps({**GOOD, "type": "Relationship Explanation"}) + "\n").encode()))
    assert read_questions(path) == [OpenQuestion(**{**GOOD, "question": "Why is Ohio significant?"})]


def test_templates_are_deterministic_and_take_the_categories_in_turn():
    graphs = [
        GraphEntities("g0", 0, ("Richard Nixon",), ("Gerald Ford",)),
        GraphEntities("g1", 1, ("Ohio",)),  # nothing to compare with
        GraphEntities("g2", 2, ()),  # no named topic entity
        GraphEntities("g3", 3, ("Jamaica", "Cuba")),
        GraphEntities("g4", 4, ("Tom Hanks",), ("Meg Ryan",)),
    ]
    first, counts = template_questions(graphs)
    again, _ = template_questions(list(graphs))
    assert first == again
    assert [q.id for q in first] == ["g0/descriptive", "g1/explanatory", "g3/comparative", "g4/critical"]
    assert first[2].entities == ["Jamaica", "Cuba"] and first[2].question.startswith(
        "Compare and contrast Jamaica and Cuba"
    )
    assert counts["graphs"] == 5 and counts["graphs_without_named_entity"] == 1 and counts["questions"] == 4

    two, counts = template_questions(graphs, per_graph=2)
    by_graph = {g: [q.type for q in two if q.graph_id == g] for g in ("g0", "g1", "g3", "g4")}
    assert by_graph == {
        "g0": ["descriptive", "explanatory"],
        "g1": ["predictive", "critical"],  # comparative (at 1 * 2 + 1) passed over
        "g3": ["explanatory", "predictive"],
        "g4": ["comparative", "critical"],
    }
    assert counts["comparative_passed_over"] == 1
    assert all(q.question.endswith("?") and q.entities[0] in q.question for q in two)
    assert assign_types(1, 2, QUESTION_TYPES, can_compare=True) == (["predictive", "comparative"], False)
    only, counts = template_questions(graphs, types=["Contrast Analysis"])  # a sub-type names its category
    assert [q.id for q in only] == ["g0/comparative", "g3/comparative", "g4/comparative"]
    with pytest.raises(ValueError, match="unknown question category 'musing'"):
        template_questions(graphs, types=["musing"])


@pytest.fixture(scope="module")
def mini_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("index_cache")


@pytest.fixture(scope="module")
def mini_index(webqsp_mini, mini_cache):
    from gsr_train.kg.index import get_index

    return get_index(webqsp_mini, splits=("test",), cache_dir=mini_cache)


def test_embedded_set_covers_the_test_graphs_of_webqsp_mini(mini_index):
    test = mini_index["test"]
    questions, counts = load_questions("embedded", known_graph_ids=test.ids)
    assert EMBEDDED.name == "webqsp_mini_open.jsonl" and counts["file"] == str(EMBEDDED)
    ids = [q.id for q in questions]
    assert len(ids) == len(set(ids)) == counts["questions"] == 232 and counts["skipped_unknown_graph"] == 0
    assert {q.graph_id for q in questions} <= set(test.ids) and len({q.graph_id for q in questions}) == 232
    assert set(counts["by_type"]) == set(QUESTION_TYPES) and min(counts["by_type"].values()) >= 30
    assert all(q.source == "template" and not re.match(r"^[mg]\.", q.entities[0]) for q in questions)
    # the file is what the generator writes today (data_prep/make_open_questions.py)
    regenerated, _ = questions_from_index(mini_index, "test")
    assert regenerated == questions


def answer_everything(messages, params) -> str:
    """Keep one question per asked category and trip every reject reason once."""
    user = messages[-1]["content"]
    entity = re.search(r"^Topic entity: (.*)$", user, re.M).group(1)  # webqsp_mini: one topic entity
    asked = re.search(r"one for each of these categories: (.*)$", user, re.M).group(1).split(", ")
    a, b = asked[0], asked[-1]
    other = next(t for t in QUESTION_TYPES if t not in asked)
    return "\n".join(
        [
            f"1. {a}: What is the story of {entity}, in detail?",
            f"- **{b.title()}**: How does {entity} matter today?",
            "this line has no label",  # unparsed
            f"trivia: What is {entity}?",  # unknown_category
            f"{a}:",  # empty
            f"{other}: Why does {entity} exist?",  # not_requested
            f"{a}: Tell me about {entity}.",  # no_question_mark
            f"{a}: What happened to the world?",  # no_entity_named
            f"{b}: HOW does {entity} matter, today?",  # duplicate
            f"{a}: Why is {entity} remembered?",  # over_limit
        ]
    )


def _step_cfg(data, cache, out, **kw) -> dict:
    return {
        "data": {"dir": str(data)},
        "split": "test",
        "cache_dir": str(cache),
        "types": list(QUESTION_TYPES),
        "per_graph": 2,
        "limit": 6,
        "output": str(out),
        "prompt": {"system": "open_questions_system", "user": "open_questions_user"},
        **kw,
    }


def test_llm_step_keeps_checked_questions_and_counts_every_reject(webqsp_mini, mini_cache, mini_index, tmp_path):
    out = tmp_path / "open_test.jsonl.gz"
    cfg = _step_cfg(webqsp_mini, mini_cache, out)
    with serve_in_thread(ScriptedBackend(answer_everything)) as srv:
        summary = step.run({**cfg, "llm": _llm(srv, tmp_path, use_cache=False)})
        asked = srv.stats.completed
        c = summary["counts"]
        assert asked == 6 and c["graphs"] == c["requests"] == c["graphs_answered"] == 6
        assert c["questions_kept"] == 12 and c["lines_rejected"] == 48 and c["graphs_without_question"] == 0
        assert {k: v for k, v in c.items() if k.startswith("rejected_")} == {
            f"rejected_{r}": 6 for r in step.REJECT_REASONS
        }
        assert c["graphs_without_named_entity"] == 0 and c["requests_skipped_after_errors"] == 0
        rows = [json.loads(line) for line in gzip.open(out, "rt")]
        questions = read_questions(out)  # the step's rows are question rows
        test = mini_index["test"]
        expected = []
        for i in range(6):
            g = step.graph_entities(mini_index, "test", i)
            expected += [(test.ids[i], t) for t in assign_types(i, 2, QUESTION_TYPES, g.other is not None)[0]]
        assert [(q.graph_id, q.type) for q in questions] == expected
        assert [q.id for q in questions] == [f"{g}/llm-{t}" for g, t in expected]
        assert all(q.source == "llm" and q.question.endswith("?") for q in questions)
        assert all(r["raw_response"] and r["request_key"] for r in rows)
        responses = [json.loads(line) for line in gzip.open(tmp_path / "open_test.responses.jsonl.gz", "rt")]
        assert len(responses) == 6 and all(len(r["rejected"]) == 8 for r in responses)

        # a re-run (no response cache) takes every answer from the previous output: nothing asked
        again = step.run({**cfg, "llm": _llm(srv, tmp_path, use_cache=False)})
        assert srv.stats.completed == asked and again["usage"]["reused_from_output"] == 6
        assert again["counts"] == summary["counts"] and read_questions(out) == questions


def test_llm_step_skips_graphs_without_a_named_topic_or_a_category(tmp_path):
    rows = [
        ("r0", "m.0abc", [["m.0abc", "a.b.c", "Zeta"]]),  # a raw Freebase id is not a name
        ("r1", "Alpha", [["Alpha", "x.y.born_in", "Paris"], ["Alpha", "x.y.works_on", "Maths"]]),
        ("r2", "Gamma", [["Gamma", "x.y.born_in", "Rome"]]),  # nothing of its kind to compare with
    ]
    rows[1][2].extend([["Beta", "x.y.born_in", "Lyon"], ["Beta", "x.y.works_on", "Physics"]])
    data = tmp_path / "rog"
    data.mkdir()
    with open(data / "test.jsonl", "w") as f:
        for qid, topic, graph in rows:
            row = {"id": qid, "question": f"about {topic}", "answer": ["x"], "q_entity": [topic]}
            f.write(json.dumps({**row, "a_entity": [], "graph": graph, "choices": []}) + "\n")
    out = tmp_path / "open.jsonl"
    cfg = _step_cfg(data, tmp_path / "cache", out, types=["comparative"], per_graph=1, limit=None)
    answer = "comparative: Compare and contrast Alpha and Beta: which mattered more?"
    with serve_in_thread(ScriptedBackend(answer)) as srv:
        summary = step.run({**cfg, "llm": _llm(srv, tmp_path)})
        assert srv.stats.completed == 1
    c = summary["counts"]
    assert c["graphs"] == 3 and c["requests"] == 1 and c["questions_kept"] == 1
    assert (
        c["graphs_without_named_entity"] == 1
        and c["graphs_without_category"] == 1
        and c["comparative_passed_over"] == 1
    )
    (q,) = read_questions(out)
    assert (q.id, q.type, q.entities) == ("r1/llm-comparative", "comparative", ["Alpha", "Beta"])
    with pytest.raises(ValueError, match="llm_open_questions: types: unknown question category 'musing'"):
        step.run({**cfg, "types": ["musing"]})


def test_llm_open_questions_command_line(webqsp_mini, tmp_path):
    """The command of docs/how-to/open-ended-evaluation.md, pointed at a scripted server (and at the
    fixture where the page says ../shared/data): rows, summary, exit 0."""
    from .doc_blocks import blocks, commands

    (line,) = commands(blocks("docs/how-to/open-ended-evaluation.md")[1])
    program, *written = shlex.split(line)
    assert program == ".venv/bin/gsr-train" and "data.dir=../shared/data/webqsp_mini" in written
    written = [f"data.dir={webqsp_mini}" if w.startswith("data.dir=") else w for w in written]
    gsr_train = str(Path(sys.executable).parent / "gsr-train")
    out = tmp_path / "open_questions_test.jsonl.gz"
    with serve_in_thread(ScriptedBackend(answer_everything)) as srv:
        done = subprocess.run(
            [
                gsr_train,
                *written,
                f"output={out}",
                f"llm.base_url={srv.base_url}",
                "llm.model=scripted",
                "llm.autostart=null",
                f"llm.cache_path={tmp_path / 'responses.sqlite'}",
                f"hydra.run.dir={tmp_path / 'hydra'}",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "GSR_TRAIN_CACHE": str(tmp_path / "cache")},
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert srv.stats.completed == 20
    summary = json.loads((tmp_path / "open_questions_test.summary.json").read_text())
    assert summary["counts"]["requests"] == 20 and summary["counts"]["questions_kept"] == 20  # per_graph: 1
    assert len(read_questions(out)) == 20 and "llm_open_questions" in done.stdout


# OKGQA's filtered_questions_v3.csv lists no entity on six of its 794 rows, in this layout (its row 316,
# file line 318): the placeholders filled, both entity columns '{}'.
OKGQA_NO_ENTITY = [
    "316",
    "Based on current trends in renewable energy, how do you predict the adoption of solar power will develop "
    "over the next decade?",
    "predictive",
    "{'field': 'renewable energy', 'technology': 'solar power', 'time': 'next decade'}",
    "high",
    "medium",
    "{}",
    "316",
    "{}",
]


def _okgqa_with_empty_rows(tmp_path: Path, rows: int, empty_at: tuple[int, ...]) -> Path:
    """OKGQA's layout with ``rows`` rows, those at ``empty_at`` listing no entity (as row 316 does)."""
    out = []
    for k in range(rows):
        if k in empty_at:
            out.append([str(k) if i in (0, 7) else cell for i, cell in enumerate(OKGQA_NO_ENTITY)])
        else:
            out.append(
                _okgqa_row(k, f"Please describe Person {k}'s contributions.", "descriptive", {"person": f"P_{k}"})
            )
    return _write_csv(tmp_path / "filtered_questions_v3.csv", OKGQA_HEADER, out)


def test_okgqa_rows_that_list_no_entity_stop_the_load_naming_the_option_or_are_counted(tmp_path):
    path = _okgqa_with_empty_rows(tmp_path, 400, empty_at=(316, 350))
    with pytest.raises(OpenQuestionError) as err:
        load_questions(path)
    assert str(err.value) == (
        f"{path}: line 318: field 'dbpedia_entities_re': no entity listed "
        "(set open_ended.skip_no_entity=true to count and skip such rows)"
    )
    qs, counts = load_questions(path, known_graph_ids=[str(k) for k in range(400)], skip_no_entity=True)
    assert counts["questions_read"] == len(qs) == 398
    assert counts["skipped_no_entity"] == 2 and counts["skipped_no_entity_lines"] == [318, 352]
    ids = [q.graph_id for q in qs]
    assert "316" not in ids and ids[316] == "317"  # the other rows keep OKGQA's graph numbers


def test_okgqa_skip_no_entity_is_an_option_of_the_open_ended_experiments():
    from gsr_train.options.check import check_recipe

    from .conftest import compose_config

    cfg = compose_config(["+experiment=okgqa_open_ended", "open_ended.skip_no_entity=true"])
    check_recipe(cfg)  # a known, typed option
    assert cfg.open_ended.skip_no_entity is True


@pytest.mark.skipif(
    not os.environ.get("GSR_OKGQA_CSV"), reason="set GSR_OKGQA_CSV to OKGQA's filtered_questions_v3.csv"
)
def test_okgqas_own_question_file_loads_with_its_six_empty_rows_counted():
    qs, counts = load_questions(os.environ["GSR_OKGQA_CSV"], skip_no_entity=True)
    assert len(qs) == 788 and counts["skipped_no_entity"] == 6
    assert counts["skipped_no_entity_lines"] == [318, 351, 372, 465, 599, 731]
