"""Parsing of model answers: JSON, numbered lists, evidence / ans lines, chains, triples, templates."""

from __future__ import annotations

from gsr_train.llm.parsing import (
    check_templates,
    extract_json,
    parse_answers,
    parse_chain,
    parse_chain_selection,
    parse_templates,
    parse_triple,
    parse_triple_selection,
    prefixed_lines,
    split_marker,
)

CANDS = [
    ["people.person.gender", "people.person.gender"],
    ["people.sibling_relationship.sibling", "people.sibling_relationship.sibling"],
    ["people.person.children", "people.person.parents"],
]


def test_extract_json_fenced_bare_and_embedded():
    assert extract_json('```json\n{"chains": [1, 2]}\n```') == {"chains": [1, 2]}
    assert extract_json("Sure! Here: [3, 1] as requested.") == [3, 1]
    assert extract_json("no json here (1, 2)") is None


def test_split_marker_variants():
    assert split_marker("1. foo") == (1, "foo")
    assert split_marker("  12) bar") == (12, "bar")
    assert split_marker("- baz") == (None, "baz")
    assert split_marker("plain") == (None, "plain")


def test_parse_chain_separators():
    want = ("film.actor.film", "film.performance.character")
    assert parse_chain("film.actor.film -> film.performance.character") == want
    assert parse_chain("film.actor.film, film.performance.character") == want
    assert parse_chain('["film.actor.film", "film.performance.character"]') == want
    assert parse_chain("film.actor.film → film.performance.character.") == want


def test_chain_selection_numbers_lines_and_chain_text():
    sel = parse_chain_selection("2\n3", CANDS)
    assert sel.selected == [1, 2] and sel.rejected == [] and sel.method == "lines"
    # list numbering is not a reference when the item holds a chain: the chain text decides
    sel = parse_chain_selection("1. people.sibling_relationship.sibling -> people.sibling_relationship.sibling", CANDS)
    assert sel.selected == [1]
    sel = parse_chain_selection("Chains: 1, 3", CANDS)
    assert sel.selected == [0, 2]


def test_chain_selection_rejects_hallucinated_and_out_of_range():
    text = "2\npeople.person.sibling_s -> people.person.name\n7"
    sel = parse_chain_selection(text, CANDS)
    assert sel.selected == [1]
    assert sel.rejected == ["people.person.sibling_s -> people.person.name", "#7"]
    # a prefix of a candidate is not the candidate
    sel = parse_chain_selection("people.person.children", CANDS)
    assert sel.selected == [] and sel.rejected == ["people.person.children"]


def test_chain_selection_json_forms_and_prose():
    sel = parse_chain_selection('```json\n{"chains": [3, "people.person.gender -> people.person.gender"]}\n```', CANDS)
    assert sel.method == "json" and sel.selected == [2, 0]
    sel = parse_chain_selection('[["people.person.children", "people.person.parents"], ["a.b.c"]]', CANDS)
    assert sel.selected == [2] and sel.rejected == ["a.b.c"]
    # prose with a number selects nothing
    sel = parse_chain_selection("I looked at the 3 candidates and none is relevant.", CANDS)
    assert sel.selected == [] and sel.rejected == []


def test_prefixed_lines_evidence_and_ans():
    text = (
        "Reasoning...\nevidence: (a, b.c.d, e)\n**Evidence**: (f, g.h.i, j)\n1. ans: Paris\n"
        "ans: 2012 (2012 World Series)"
    )
    assert prefixed_lines(text, "evidence") == ["(a, b.c.d, e)", "(f, g.h.i, j)"]
    assert parse_answers(text) == ["Paris", "2012 (2012 World Series)"]


def test_parse_triple_forms_and_commas_in_names():
    rels = {"people.person.place_of_birth"}
    assert parse_triple("(Martin Luther King, Jr., people.person.place_of_birth, Atlanta)", rels) == (
        "Martin Luther King, Jr.",
        "people.person.place_of_birth",
        "Atlanta",
    )
    assert parse_triple("Lou Seal | sports.mascot.team | San Francisco Giants") == (
        "Lou Seal",
        "sports.mascot.team",
        "San Francisco Giants",
    )
    assert parse_triple('["a", "b.c.d", "e"]') == ("a", "b.c.d", "e")
    assert parse_triple("no triple here") is None


def test_triple_selection_matches_candidates_only():
    cands = [
        ["Lou Seal", "sports.mascot.team", "San Francisco Giants"],
        ["San Francisco Giants", "sports.sports_team.championships", "2010 World Series"],
    ]
    text = (
        "evidence: (Lou Seal, sports.mascot.team, San Francisco Giants)\n"
        "evidence: (san francisco giants, sports.sports_team.championships, 2010 World Series)\n"
        "evidence: (San Francisco Giants, sports.sports_team.championships, 1954 World Series)\n"
    )
    sel = parse_triple_selection(text, cands, limit=20)
    assert sel.selected == [0, 1]
    assert sel.rejected == ["(San Francisco Giants, sports.sports_team.championships, 1954 World Series)"]
    sel = parse_triple_selection(text, cands, limit=1)
    assert sel.selected == [0] and sel.over_limit == 1
    # numbers count only if the prompt numbered the candidates
    assert parse_triple_selection("evidence: 2", cands, numbered=True).selected == [1]
    assert parse_triple_selection("evidence: 2", cands, numbered=False).rejected == ["#2"]
    sel = parse_triple_selection('[["Lou Seal", "sports.mascot.team", "San Francisco Giants"]]', cands)
    assert sel.method == "json" and sel.selected == [0]


def test_templates_parsed_and_validated():
    text = (
        "1. Where was [SUBJECT] born?\n2) where was [subject] born\n3. What is the birthplace of [SUBJECT]?\n"
        "4. Where was he born?\n5. [SUBJECT] and [SUBJECT]?\n6. [SUBJECT]?\n"
    )
    found = parse_templates(text)
    assert len(found) == 6
    check = check_templates(found, max_templates=10)
    assert check.kept == ["Where was [SUBJECT] born?", "What is the birthplace of [SUBJECT]?"]
    assert [r["reason"] for r in check.rejected] == ["duplicate", "no_slot", "multiple_slots", "no_question_text"]
    assert parse_templates('```json\n["Who is [SUBJECT] married to?"]\n```') == ["Who is [SUBJECT] married to?"]
    assert [r["reason"] for r in check_templates(["a [SUBJECT] b", "c [SUBJECT] d"], max_templates=1).rejected] == [
        "over_limit"
    ]


def test_answer_is_lines():
    assert parse_chain_selection("The answer is: 2.", CANDS).selected == [1]
    assert parse_chain_selection("the final answer is 1, 3", CANDS).selected == [0, 2]
    assert parse_chain_selection("The answer is: 3. people.person.gender.", CANDS).rejected == ["people.person.gender"]


def test_templates_copied_from_the_prompt_or_not_questions_are_rejected():
    prompt = "Relation: people.person.spouse_s\n10 questions with [SUBJECT]:"
    found = parse_templates(
        "Question: 10 questions with [SUBJECT]:\nQ1: Who is [SUBJECT] married to?\nName the wife of [SUBJECT]."
    )
    assert found == ["10 questions with [SUBJECT]:", "Who is [SUBJECT] married to?", "Name the wife of [SUBJECT]."]
    check = check_templates(found, prompt=prompt, require_question_mark=True)
    assert check.kept == ["Who is [SUBJECT] married to?"]
    assert [r["reason"] for r in check.rejected] == ["copied_from_prompt", "not_a_question"]
