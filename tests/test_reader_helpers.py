"""Helpers for the reader tests: a tiny random LLaMA + a tiny BPE tokenizer with a chat template."""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "Based on the triples retrieved from a knowledge graph, please answer the question.",
    "Triples: (Jamaica, location.country.languages_spoken, Jamaican English) Question: what language",
    "ans: Jamaican English ans: Jamaican Creole English Language Paris London Berlin",
    "Reasoning Paths: Jamaica -> location.country.official_language -> Jamaican English",
    "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,:;()[]-_>< \n",
]


def tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<unk>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_llama_folder(path: Path, seed: int = 0, context: int = 512) -> Path:
    """Save a 2-layer random LlamaForCausalLM + tokenizer to ``path`` (reloaded quantised by tests).

    ``context``: its maximum sequence length (rotary positions: no weights depend on it)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tiny_tokenizer()
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def reader_run_overrides(tmp_path: Path, data: Path, model: Path) -> list[str]:
    """What every reader run in the tests shares: a private cache, no loggers or bars, the hand-made
    train + test folder ``data`` and the tiny fp32 reader ``model``."""
    return [
        f"paths.cache_dir={tmp_path / 'cache'}",
        "experiment_name=test",
        "logger=none",
        "~callbacks.rich_progress",
        "~callbacks.step_checkpoint",
        "trainer.enable_progress_bar=false",
        f"data.dir={data}",
        "data.splits=[train,test]",
        "data.labels={}",
        "reader=tiny_llama",
        f"reader.model={model}",
        "reader.precision=fp32",
    ]
