"""Batched greedy generation for a local reader (HF / peft model) and the prompting-only reader.

Local: prompts are chat-templated, sorted by length (so a batch pads little), left-padded,
and decoded greedily with ``max_new_tokens``; answers come back in the input order.
Remote: the same messages go to any OpenAI-compatible endpoint through the project's
`gsr_train.llm.client.ChatClient` (response cache, retries, cost accounting).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from gsr_train.llm.client import ChatClient, ChatRequest
from gsr_train.readers.prompts import ReaderExample

log = logging.getLogger(__name__)


@torch.inference_mode()
def generate_local(
    model,
    tokenizer,
    examples: Sequence[ReaderExample],
    batch_size: int = 16,
    max_new_tokens: int = 48,
    progress: bool = True,
) -> list[str]:
    """Greedy responses of ``model`` for every example (input order)."""
    prompts = [
        tokenizer.apply_chat_template(ex.messages, add_generation_prompt=True, tokenize=False) for ex in examples
    ]
    enc = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    order = sorted(range(len(prompts)), key=lambda i: len(enc[i]))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = tokenizer.eos_token_id
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[str] = [""] * len(prompts)
    t0 = time.perf_counter()
    for b, start in enumerate(range(0, len(order), batch_size)):
        idx = order[start : start + batch_size]
        width = max(len(enc[i]) for i in idx)
        ids = torch.full((len(idx), width), pad, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for row, i in enumerate(idx):
            ids[row, width - len(enc[i]) :] = torch.tensor(enc[i])
            mask[row, width - len(enc[i]) :] = 1
        gen = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=pad,
            eos_token_id=eos,
        )
        for row, i in enumerate(idx):
            out[i] = tokenizer.decode(gen[row, width:], skip_special_tokens=True).strip()
        if progress and (b + 1) % 5 == 0:
            done = min(start + batch_size, len(order))
            log.info("generated %d/%d (%.1fs)", done, len(order), time.perf_counter() - t0)
    if was_training:
        model.train()
    return out


def generate_remote(
    llm_cfg: Mapping[str, Any], examples: Sequence[ReaderExample], max_new_tokens: int | None = None, transport=None
) -> tuple[list[str], dict]:
    """Responses of an OpenAI-compatible endpoint (prompting-only reader) and the usage figures.

    A request that failed and was skipped (``llm.on_error=skip``) gives an empty response
    (no answer). ``transport``: an ``httpx`` transport (tests)."""
    params = {"max_tokens": int(max_new_tokens)} if max_new_tokens else {}
    requests = [ChatRequest(id=ex.id, messages=ex.messages, params=params) for ex in examples]
    with ChatClient(llm_cfg, transport=transport) as client:
        results = client.run(requests)
        usage = client.stats.to_dict()
    return [r.text or "" for r in results], usage
