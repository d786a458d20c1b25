"""Open-vocabulary relation heads (model.relation_head=open): relation vectors come from relation
names, so a saved model decodes relations added after training, and saves / loads exactly."""

from __future__ import annotations

import pytest
import torch

from gsr_train.models.gsr.decoding import beam_chains
from gsr_train.models.gsr.modeling import GSRModel, build_gsr_model, load_gsr
from gsr_train.models.gsr.options import DecodeConfig

from .scale_helpers import TINY_T5_CONFIG

RELS = ["people.person.nationality", "film.film.directed_by", "location.location.containedby"]
SMALL = {
    "family": "minilm",
    "name": "open",
    "relation_head": "open",
    "decoder": {"layers": 1, "heads": 6, "intermediate_size": 128, "max_positions": 8},
}


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_gsr_model(SMALL, RELS).eval()


def _logits(gsr, text="who directed the film", chain=(1,)):
    enc = gsr.encode([text])
    with torch.no_grad():
        return gsr.model(
            input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=gsr.labels([chain])
        ).logits


def test_relation_vectors_come_from_names_and_train(model):
    table = model.relation_table
    assert model.open_vocabulary and table.num_relations == len(RELS)
    weights, _ = table.weights()
    assert weights.shape == (3 + len(RELS), model.model.config.decoder.hidden_size)
    # without residuals, a relation's vector is a function of its words only
    no_res = build_gsr_model({**SMALL, "relation_residual": False}, RELS + ["film.film.directed.by"])
    w, _ = no_res.relation_table.weights()
    # "film film directed by" twice (encoded at two places of one padded batch: float noise only)
    assert torch.allclose(w[3 + 1], w[3 + 3], atol=1e-6)
    # gradients reach the projection (the table is learned, the text is not)
    model.train()
    enc = model.encode(["who directed the film"])
    loss = model.model(
        input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=model.labels([(1,)])
    ).loss
    loss.backward()
    assert table.proj.weight.grad.abs().sum() > 0 and table.text.grad is None
    model.zero_grad()
    model.eval()


def test_open_model_saves_loads_and_checkpoints_exactly(model, tmp_path):
    model.save_pretrained(tmp_path / "m")
    again = load_gsr(tmp_path / "m")
    assert torch.equal(_logits(model), _logits(again))
    rebuilt = GSRModel.from_checkpoint_state(model.checkpoint_state())
    rebuilt.load_state_dict(model.state_dict(), strict=True)
    assert torch.equal(_logits(model.eval()), _logits(rebuilt.eval()))


def test_relations_added_after_training_are_decodable_by_name(model, tmp_path):
    model.save_pretrained(tmp_path / "m")
    gsr = load_gsr(tmp_path / "m")
    before, _ = gsr.relation_table.weights()
    assert gsr.extend_relations(["music.artist.genre", "film.film.directed_by"]) == 1
    after, _ = gsr.relation_table.weights()
    assert torch.equal(before, after[: before.shape[0]])  # known relations keep their vectors
    assert gsr.relations.relations[-1] == "music.artist.genre" and gsr.out_size == 3 + 4
    assert gsr.relation_table.residual_mask.view(-1).tolist() == [1.0, 1.0, 1.0, 0.0]
    beams = beam_chains(gsr, ["what genre does the band play"], DecodeConfig(beams=8, top_n=8, max_hops=1))[0]
    assert (3,) in {b.chain for b in beams}  # the new relation is in the output vocabulary
    gsr.save_pretrained(tmp_path / "m2")
    assert load_gsr(tmp_path / "m2").relations.relations == gsr.relations.relations


def test_token_models_refuse_new_relations_and_unknown_heads_are_named():
    token = build_gsr_model({**SMALL, "relation_head": "token"}, RELS)
    assert not token.open_vocabulary
    with pytest.raises(ValueError, match="open-vocabulary"):
        token.extend_relations(["music.artist.genre"])
    with pytest.raises(ValueError, match="relation_head"):
        build_gsr_model({**SMALL, "relation_head": "words"}, RELS)


def test_residual_dropout_drops_whole_relations_in_training_only():
    torch.manual_seed(0)
    gsr = build_gsr_model({**SMALL, "relation_residual_dropout": 0.5}, RELS + ["music.artist.genre"])
    table = gsr.relation_table
    with torch.no_grad():
        table.residual.fill_(1.0)
    base = table.proj(table.text)
    gsr.train()
    torch.manual_seed(1)
    with torch.enable_grad():
        rel = table.weights()[0][3:].detach() - base.detach()
    kept = rel.abs().sum(1) > 0
    assert 0 < int(kept.sum()) < len(kept)  # some relations keep their residual, some do not
    assert torch.allclose(rel[kept], torch.ones_like(rel[kept]), atol=1e-5)  # whole rows, unscaled
    gsr.eval()
    with torch.no_grad():
        assert torch.allclose(table.weights()[0][3:] - base, torch.ones_like(base), atol=1e-5)
    with pytest.raises(ValueError, match="dropout"):
        build_gsr_model({**SMALL, "relation_residual_dropout": 1.0}, RELS)


T5 = {
    "family": "t5",
    "name": "tiny",
    "tokenizer": "minilm",
    "relation_head": "open",
    "config": {**TINY_T5_CONFIG},
}


def test_open_t5_keeps_its_words_and_reads_relations_from_the_table(tmp_path):
    torch.manual_seed(0)
    gsr = build_gsr_model(T5, RELS).eval()
    base = gsr.spec["base_vocab"]
    assert gsr.open_vocabulary and gsr.out_ids.tolist() == [base, base + 1, base + 2] and gsr.out_size == base + 3
    table, bias = gsr.relation_table.weights()
    emb = gsr.model.get_input_embeddings()
    # relation vectors start at the scale of the word rows (a random T5's are std 1, the text's ~0.05)
    assert 0.5 < float(table.std() / emb.words.weight.std()) < 2.0
    ids = torch.tensor([[5, base + 1]])
    with torch.no_grad():
        out = emb(ids)
    assert torch.equal(out[0, 0], emb.words.weight[5]) and torch.equal(out[0, 1], table[1])
    # the relation logits are the table's scores (+ its text bias); words keep their rows
    hidden = torch.randn(1, 1, 32)
    with torch.no_grad():
        logits = gsr.model.lm_head(hidden)
    assert logits.shape[-1] == base + 3
    assert torch.allclose(logits[0, 0, base:], hidden[0, 0] @ table.T + bias, atol=1e-5)
    # one copy of every weight in the state dict; training reaches the projection
    keys = list(gsr.state_dict())
    assert sum(k.endswith("words.weight") for k in keys) == 1 and not any("embed_tokens" in k for k in keys)
    gsr.train()
    loss = gsr.model(**{k: v for k, v in gsr.encode(["who directed the film"]).items()}, labels=gsr.labels([(1,)])).loss
    loss.backward()
    assert gsr.relation_table.proj.weight.grad.abs().sum() > 0
    gsr.zero_grad()
    gsr.eval()
    # saved, loaded, checkpointed: the same logits
    gsr.save_pretrained(tmp_path / "m")
    again = load_gsr(tmp_path / "m")
    assert torch.equal(_logits(gsr), _logits(again))
    rebuilt = GSRModel.from_checkpoint_state(gsr.checkpoint_state())
    rebuilt.load_state_dict(gsr.state_dict(), strict=True)
    assert torch.equal(_logits(gsr), _logits(rebuilt.eval()))
    # relations added by name after training are decoded
    assert again.extend_relations(["music.artist.genre"]) == 1 and again.out_size == base + 4
    beams = beam_chains(again, ["what genre does the band play"], DecodeConfig(beams=8, top_n=8, max_hops=1))[0]
    assert (3,) in {b.chain for b in beams}
    again.save_pretrained(tmp_path / "m2")
    assert torch.equal(_logits(again), _logits(load_gsr(tmp_path / "m2")))


def test_token_t5_is_unchanged_by_the_option():
    token = build_gsr_model({**T5, "relation_head": "token"}, RELS)
    assert not token.open_vocabulary and token.spec["relation_head"] == "token"
    with pytest.raises(ValueError, match="relation_head"):
        build_gsr_model({**T5, "relation_head": "words"}, RELS)
