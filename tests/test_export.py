"""Export -> reload round trips for the three model kinds (identical outputs) and the model card."""

from __future__ import annotations

import json
import warnings

import pytest
import pytorch_lightning as pl
import torch

from gsr_train.export.exporters import EXPORT_INFO, detect_kind, export_model

from .scale_helpers import KINDS, make_datamodule

pytestmark = pytest.mark.usefixtures("one_thread")


def _fit_ckpt(kind: str, ctx: dict, root, steps: int = 3):
    """A real Lightning checkpoint of a few training steps."""
    module = KINDS[kind]["module"](ctx)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        limit_val_batches=0,
        default_root_dir=str(root),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, make_datamodule(kind, ctx, 4, module=module))
    path = root / "checkpoints" / "last.ckpt"
    trainer.save_checkpoint(path)
    return module, path


def _card(folder) -> str:
    return (folder / "README.md").read_text()


def test_subgraphrag_export_round_trip(tmp_path):
    from gsr_train.export import SubgraphRAGScorer
    from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever

    ctx = KINDS["subgraphrag"]["setup"](tmp_path)
    run = tmp_path / "run"
    _, ckpt = _fit_ckpt("subgraphrag", ctx, run)
    (run / "metrics.json").write_text(
        json.dumps(
            {
                "data": "toy",
                "split": "test",
                "checkpoint": str(ckpt),
                "model": {"name": "subgraphrag", "scorer": {"hidden": 32}, "train": {"epochs": 1}},
                "at_k": {"k": 7, "answer_recall": 0.5, "sp_recall": 0.25},
                "metrics": {"subgraphrag": {"overall": {"answer_recall": {"10": 0.75}}}},
            }
        )
    )
    assert detect_kind(run) == "subgraphrag" and detect_kind(ckpt) == "subgraphrag"
    out = tmp_path / "export"
    info = export_model(run, out)
    assert {"config.json", "model.safetensors", "README.md", EXPORT_INFO} <= {p.name for p in out.iterdir()}
    assert not (out / "README.md").read_text().startswith("---\n# For reference")  # our card, not the mixin's

    reloaded = SubgraphRAGScorer.from_pretrained(out)
    assert reloaded.meta["encoder_name"] == ctx["emb"].encoder_name and not reloaded.training
    split, emb = ctx["index"]["test"], ctx["emb"]
    a = SubgraphRAGRetriever.from_checkpoint(ckpt).score_split(split, emb.question["test"], emb)
    b = SubgraphRAGRetriever(reloaded).score_split(split, emb.question["test"], emb)
    assert a.numel() == int(split.edge_ptr[-1]) and torch.equal(a, b)
    assert "no_text" in dict(reloaded.named_parameters()) or any("no_text" in n for n in reloaded.state_dict())

    card = _card(out)
    assert "dataset: `toy`" in card and "| test/answer_recall@7 | 0.5000 |" in card
    assert "SubgraphRAGScorer.from_pretrained" in card and '"hidden": 32' in card
    assert info["metrics"]["test/answer_recall@10"] == 0.75


def test_gsr_export_round_trip_keeps_relation_tokens(tmp_path):
    from gsr_train.models.gsr.modeling import GSRModel, load_gsr

    ctx = KINDS["gsr"]["setup"](tmp_path)
    _, ckpt = _fit_ckpt("gsr", ctx, tmp_path / "run")
    assert detect_kind(ckpt) == "gsr"
    out = tmp_path / "export"
    info = export_model(ckpt, out)
    assert {"relations.txt", "gsr_config.json", "tokenizer.json", "model.safetensors", "README.md"} <= {
        p.name for p in out.iterdir()
    }
    src, new = load_gsr(ckpt), GSRModel.from_pretrained(out)
    assert new.relations.relations == src.relations.relations == ctx["relations"]
    assert torch.equal(new.relations.token_ids, src.relations.token_ids)
    # one atomic token per relation in the saved tokenizer: a relation name encodes to its own id
    for k, rel in enumerate(ctx["relations"][:3]):
        ids = new.tokenizer(rel, add_special_tokens=False)["input_ids"]
        assert ids == [int(new.relations.token_ids[k])]
    texts = [q.question for q in ctx["validation"][:4]]
    enc = src.encode(texts)
    labels = src.labels([(0,), (1, 2), (3,), (4, 5)])
    dec = torch.cat([torch.full((4, 1), src.start_id), labels.clamp_min(0)[:, :-1]], 1)
    with torch.no_grad():
        la = src.model(**enc, decoder_input_ids=dec).logits
        lb = new.model(**new.encode(texts), decoder_input_ids=dec).logits
    assert torch.equal(la, lb)
    from gsr_train.models.gsr.decoding import beam_chains

    ca = [[b.chain for b in q] for q in beam_chains(src, texts, {"beams": 3, "top_n": 2, "max_hops": 2})]
    cb = [[b.chain for b in q] for q in beam_chains(new, texts, {"beams": 3, "top_n": 2, "max_hops": 2})]
    assert ca == cb
    card = _card(out)
    assert "GSRModel.from_pretrained" in card and f"{len(ctx['relations'])} relation tokens" in card
    assert info["kind"] == "gsr"


def _tiny_llama(folder):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(folder)
    return model


def test_reader_adapter_export_round_trip(tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import LlamaForCausalLM

    base_dir = tmp_path / "base"
    _tiny_llama(base_dir)
    model = get_peft_model(
        LlamaForCausalLM.from_pretrained(base_dir), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    )
    with torch.no_grad():  # a trained-looking adapter (B = 0 at init would hide a lost adapter)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    run = tmp_path / "run"
    model.save_pretrained(run / "adapter")
    (run / "adapter" / "reader.json").write_text(
        json.dumps({"base_model": str(base_dir), "k": 30, "format": "triples"})
    )
    (run / "metrics.json").write_text(
        json.dumps(
            {
                "reader": {"name": "tiny_llama"},
                "qa": {"k": 30},
                "k": 30,
                "metrics": {"finetuned_retrieved": {"all": {"n": 5, "metrics": {"hit": 0.6, "macro_f1": 0.4}}}},
            }
        )
    )
    assert detect_kind(run) == "reader"
    out = tmp_path / "export"
    info = export_model(run, out)
    assert {"adapter_config.json", "adapter_model.safetensors", "reader.json", "README.md"} <= {
        p.name for p in out.iterdir()
    }
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    model.eval()
    reloaded = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(base_dir), str(out)).eval()
    plain = LlamaForCausalLM.from_pretrained(base_dir).eval()
    with torch.no_grad():
        a, b, c = model(ids).logits, reloaded(ids).logits, plain(ids).logits
    assert torch.equal(a, b) and not torch.allclose(a, c)
    card = _card(out)
    assert "AutoPeftModelForCausalLM" in card and "| finetuned_retrieved/hit | 0.6000 |" in card
    assert "library_name: peft" in card and "K = 30" in card
    assert info["base_model"] == str(base_dir)


def test_export_of_unknown_folder_is_a_clear_error(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(ValueError, match="not a SubgraphRAG / GSR / reader"):
        export_model(tmp_path / "x", tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="nothing to export"):
        export_model(tmp_path / "missing", tmp_path / "out")
    assert not (tmp_path / "out").exists()
