"""Relation tokens: vocab files, added tokens, tokenizer + model folder round trips."""

from __future__ import annotations

import pytest
import torch

from gsr_train.features.relation_tokens import (
    INDEX_PREFIX,
    RETRIEVAL_PREFIX,
    RelationTokens,
    RelationVocabError,
    add_relation_tokens,
    load_relation_file,
    relation_words,
)
from gsr_train.models.gsr.modeling import GSRModel, build_gsr_model, load_base_tokenizer

RELS = [
    "people.person.gender",
    "location.country.languages_spoken",
    "film.actor.film",
    "film.performance.character",
    "rdf-schema#domain",
]
TINY = {
    "family": "t5",
    "config": {"d_model": 16, "d_ff": 32, "num_layers": 1, "num_decoder_layers": 1, "num_heads": 2, "d_kv": 8},
}


def test_relation_file_keep_modes(tmp_path):
    path = tmp_path / "rels.txt"
    path.write_text("music\nmusic.artist\nmusic.artist.genre\n\n# comment\nmusic.artist.genre\nfilm.film.country\n")
    assert load_relation_file(path) == ["music.artist.genre", "film.film.country"]
    assert load_relation_file(path, keep="all") == ["music", "music.artist", "music.artist.genre", "film.film.country"]
    bad = tmp_path / "bad.txt"
    bad.write_text("music.artist.genre\nmusic artist genre\n")
    with pytest.raises(RelationVocabError, match="bad.txt:2"):
        load_relation_file(bad)


def test_freebase_relation_file(shared_data):
    rels = load_relation_file(shared_data / "freebase_relations.txt")
    assert len(rels) == 25714 and all(len(r.split(".")) >= 3 for r in rels)
    assert len(load_relation_file(shared_data / "freebase_relations.txt", keep="all")) == 26282


def test_relation_words():
    assert relation_words("people.person.place_of_birth") == "people person place of birth"
    assert relation_words("rdf-schema#domain") == "rdf schema domain"


def test_tokenizer_round_trip(tmp_path):
    tok = load_base_tokenizer("minilm")
    base = len(tok)
    rt = add_relation_tokens(tok, RELS)
    assert len(tok) == base + len(RELS) + 2
    # each relation is exactly one token, also inside text, and decode -> encode is the identity
    text = f"{RETRIEVAL_PREFIX} who is people.person.gender of bob film.actor.film"
    pieces = tok.tokenize(text)
    assert pieces[0] == RETRIEVAL_PREFIX and "people.person.gender" in pieces and "film.actor.film" in pieces
    ids = rt.token_ids.tolist()
    assert tok(tok.decode(ids), add_special_tokens=False)["input_ids"] == ids
    tok.save_pretrained(tmp_path / "tok")
    tok2 = type(tok).from_pretrained(tmp_path / "tok")
    rt2 = RelationTokens(tok2, RELS)
    assert torch.equal(rt.token_ids, rt2.token_ids)
    assert tok2.convert_tokens_to_ids(INDEX_PREFIX) == tok.convert_tokens_to_ids(INDEX_PREFIX)
    assert tok2(text)["input_ids"] == tok(text)["input_ids"]


def test_missing_relation_is_an_error():
    tok = load_base_tokenizer("minilm")
    add_relation_tokens(tok, RELS[:2])
    with pytest.raises(RelationVocabError, match="not single tokens"):
        RelationTokens(tok, RELS)


@pytest.mark.parametrize(
    "cfg",
    [TINY, {"family": "minilm", "decoder": {"layers": 1, "heads": 2, "intermediate_size": 64}}],
    ids=["t5", "minilm"],
)
def test_model_folder_round_trip(tmp_path, cfg):
    gsr = build_gsr_model(cfg, RELS).eval()
    labels = gsr.labels([(0, 1), (4,)])
    assert labels.tolist()[1][1] == gsr.eos_id and labels.tolist()[1][2] == -100
    assert gsr.decode(torch.tensor([[gsr.start_id, *gsr.out_ids[[3, 2]].tolist(), gsr.eos_id]])) == [(3, 2)]
    gsr.save_pretrained(tmp_path / "m")
    back = GSRModel.from_pretrained(tmp_path / "m")
    assert back.relations.relations == RELS and torch.equal(back.out_ids, gsr.out_ids)
    for a, b in zip(gsr.state_dict().values(), back.state_dict().values()):
        assert torch.equal(a, b)
