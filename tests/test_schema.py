"""SAFE's schema graph on a hand-made KG: types, support, confidence, pruning, distances."""

from __future__ import annotations

import pytest
import torch

from gsr_train.kg.schema import build_schema, infer_entity_types, relation_domain, type_distances

ENTS = ["A", "B", "C", "M", "D", "F", "G", "award.award_winner"]
RELS = [
    "people.person.nationality",
    "people.person.spouse_s",
    "people.marriage.spouse",
    "location.country.capital",
    "type.object.type",
    "common.topic.notable_types",
]
TRIPLES = [
    ("A", "people.person.nationality", "C"),
    ("B", "people.person.nationality", "C"),
    ("F", "people.person.nationality", "G"),  # G is only ever a tail: typed by the relation's range
    ("A", "people.person.spouse_s", "M"),
    ("M", "people.marriage.spouse", "B"),
    ("C", "location.country.capital", "D"),  # D: no typed tail of 'capital' -> stays untyped
    ("A", "type.object.type", "award.award_winner"),  # an explicit type triple
    ("B", "common.topic.notable_types", "C"),  # generic domain: gives no type
]


def _kg():
    e = {n: i for i, n in enumerate(ENTS)}
    r = {n: i for i, n in enumerate(RELS)}
    return torch.tensor([[e[h], r[p], e[t]] for h, p, t in TRIPLES])


def test_relation_domain():
    assert relation_domain("people.person.spouse_s") == "people.person"
    assert relation_domain("common.topic.notable_types") is None
    assert relation_domain("spouse") is None


def test_entity_types_inferred_and_from_type_triples():
    et = infer_entity_types(ENTS, RELS, _kg())
    of = {n: sorted(et.of(i)) for i, n in enumerate(ENTS)}
    assert of["A"] == ["award.award_winner", "people.person"]
    assert of["B"] == ["people.person"]
    assert of["C"] == ["location.country"]
    assert of["M"] == ["people.marriage"]
    assert of["F"] == ["people.person"]
    assert of["G"] == ["location.country"]  # range of nationality
    assert of["D"] == []  # no range for capital
    assert of["award.award_winner"] == []


def test_support_confidence_and_pruning():
    et = infer_entity_types(ENTS, RELS, _kg())
    sg = build_schema(et, _kg(), relations=RELS)
    rel = {n: i for i, n in enumerate(RELS)}
    edges = {
        (sg.types[a], RELS[r], sg.types[b]): (int(s), float(c))
        for a, r, b, s, c in zip(sg.head.tolist(), sg.relation.tolist(), sg.tail.tolist(), sg.support, sg.confidence)
    }
    assert edges == {
        ("people.person", "people.person.nationality", "location.country"): (3, 1.0),  # A, B, F / 3 persons
        ("award.award_winner", "people.person.nationality", "location.country"): (1, 1.0),
        ("people.person", "people.person.spouse_s", "people.marriage"): (1, pytest.approx(1 / 3)),
        ("award.award_winner", "people.person.spouse_s", "people.marriage"): (1, 1.0),
        ("people.marriage", "people.marriage.spouse", "people.person"): (1, 1.0),
    }
    assert int(sg.type_support[sg.types.index("people.person")]) == 3
    assert rel["location.country.capital"] not in sg.relation.tolist()  # D is untyped
    assert len(build_schema(et, _kg())) == 6  # without names: the generic relation counts too
    strict = build_schema(et, _kg(), min_support=2, relations=RELS)
    assert len(strict) == 1
    conf = build_schema(et, _kg(), min_confidence=0.5, relations=RELS)
    assert len(conf) == 4 and (
        "people.person.spouse_s"
        not in [RELS[r] for a, r in zip(conf.head.tolist(), conf.relation.tolist()) if conf.types[a] == "people.person"]
    )
    # a duplicated triple is one fact
    again = build_schema(et, torch.cat([_kg(), _kg()]), relations=RELS)
    assert torch.equal(again.support, sg.support)


def test_schema_distances_undirected_and_capped():
    et = infer_entity_types(ENTS, RELS, _kg())
    sg = build_schema(et, _kg(), max_distance=3, relations=RELS)
    t = {n: i for i, n in enumerate(sg.types)}
    d = sg.distance
    assert int(d[t["people.person"], t["location.country"]]) == 1
    assert int(d[t["location.country"], t["people.person"]]) == 1  # direction ignored
    assert int(d[t["location.country"], t["people.marriage"]]) == 2
    assert int(d[t["people.person"], t["people.person"]]) == 0
    # a chain 0-1-2-3-4 with cap 2: 3 hops and more read as cap + 1
    chain = type_distances(5, torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 4]), 2)
    assert chain[0].tolist() == [0, 1, 2, 3, 3]
