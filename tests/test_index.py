import json
import os

import torch

from gsr_train.kg.index import get_index, has_text, names_have_text

from .test_rows import good_row, write


def make_dataset(folder, extra_test=()):
    write(folder / "train.jsonl", [good_row(0), good_row(1, graph=[["X", "r1", "Z"], ["X", "r1", "Z"]])])
    write(folder / "test.jsonl", [good_row(2, q_entity=["X", "W"], a_entity=["Q"]), *extra_test])


def test_index_structure(tmp_path):
    make_dataset(tmp_path / "d")
    idx = get_index(tmp_path / "d", splits=("train", "test"), cache_dir=tmp_path / "c")
    # shared vocabulary across splits
    assert set(idx.entities) >= {"X", "Y", "Z", "m.01", "W", "Q"}
    assert idx.relations[:2] == ["people.person.spouse_s", "people.marriage.spouse"]
    train = idx["train"]
    assert train.num_edges.tolist() == [2, 1]  # duplicate triple dropped
    assert idx.skips["train"]["duplicate_triples_dropped"] == 1
    g = train.graph(0)
    heads = [idx.entities[i] for i in g.entity_ids[g.edge_index[0]].tolist()]
    tails = [idx.entities[i] for i in g.entity_ids[g.edge_index[1]].tolist()]
    assert list(zip(heads, tails)) == [("X", "m.01"), ("m.01", "Y")]
    assert [idx.entities[i] for i in g.entity_ids[g.topic_mask]] == ["X"]
    assert [idx.entities[i] for i in g.entity_ids[g.answer_mask]] == ["Y"]
    # topic W and answer Q are not in the graph: present as isolated nodes
    t = idx["test"].graph(0)
    assert t.topic_mask.sum() == 2 and t.answer_mask.sum() == 1
    assert idx.triple_strings("test", 0)[0] == ["X", "people.person.spouse_s", "m.01"]
    ge = train.global_edges()
    assert ge.shape == (3, 3) and idx.entities[ge[2, 2]] == "Z"


def test_cache_reused_then_rebuilt_on_change_and_truncation(tmp_path, caplog):
    data, cache = tmp_path / "d", tmp_path / "c"
    make_dataset(data)
    first = get_index(data, splits=("train", "test"), cache_dir=cache)
    folder = cache / "kg_index" / first.key
    stamp = os.stat(folder / "train" / "edge_rel.bin").st_mtime_ns
    again = get_index(data, splits=("train", "test"), cache_dir=cache)
    assert again.key == first.key and os.stat(folder / "train" / "edge_rel.bin").st_mtime_ns == stamp

    # changed input -> new key, new folder
    make_dataset(data, extra_test=[good_row(9, question="who is z married to")])
    changed = get_index(data, splits=("train", "test"), cache_dir=cache)
    assert changed.key != first.key and len(changed["test"]) == 2

    # truncated cache file -> detected and rebuilt
    folder = cache / "kg_index" / changed.key
    expected = changed["test"].edge_index.clone()
    blob = (folder / "test" / "edge_index.bin").read_bytes()
    (folder / "test" / "edge_index.bin").write_bytes(blob[: len(blob) // 2])
    with caplog.at_level("WARNING"):
        rebuilt = get_index(data, splits=("train", "test"), cache_dir=cache)
    assert "truncated" in caplog.text
    assert torch.equal(rebuilt["test"].edge_index, expected)
    assert (folder / "test" / "edge_index.bin").read_bytes() == blob

    # same size, damaged content -> checksum catches it
    blob = bytearray((folder / "vocab" / "entities.data.bin").read_bytes())
    blob[-1] ^= 0xFF
    (folder / "vocab" / "entities.data.bin").write_bytes(bytes(blob))
    with caplog.at_level("WARNING"):
        get_index(data, splits=("train", "test"), cache_dir=cache)
    assert "checksum" in caplog.text
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["key"] == changed.key


def test_has_text():
    assert not has_text("m.02h98gq") and not has_text("g.11b6dp")
    assert has_text("Richard Nixon") and has_text("m.a.b c")


def test_a_freebase_id_as_an_endpoints_iri_has_no_text_as_the_raw_id():
    """A Freebase endpoint answers mids as IRIs: they name nothing either (the vectorised check agrees)."""
    names = ["http://rdf.freebase.com/ns/m.0fgn3hy", "https://rdf.freebase.com/ns/g.11b6dp", "_:b0", "m.02h98gq"]
    named = ["http://rdf.freebase.com/ns/people.person", "http://dbpedia.org/resource/m.0abc", "Marilyn Monroe"]
    assert not any(map(has_text, names)) and all(map(has_text, named))
    assert names_have_text(names + named).tolist() == [False] * 4 + [True] * 3


def test_real_fixture_index(webqsp_mini, tmp_path):
    idx = get_index(webqsp_mini, splits=("test",), cache_dir=tmp_path)
    test = idx["test"]
    assert len(test) == 232
    assert int(test.edge_ptr[-1]) == test.edge_rel.numel() == test.edge_index.shape[1]
    assert int(test.ent_ptr[-1]) == test.entity_ids.numel()
    assert (test.edge_index >= 0).all()
    # local ids stay inside their own question's entity range
    sizes = test.num_entities.repeat_interleave(test.num_edges)
    assert (test.edge_index < sizes).all()
    assert test.topic_mask.sum() >= 232
