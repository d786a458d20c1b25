"""Instruction-tuning data of a reader: chat-templated prompt + answer, loss on the answer only.

Batches are left-padded, so every answer sits at the end of its row and the loss needs the
LM head (a 49k x 576 matmul per token for SmolLM2) only on the last ``answer_window``
positions instead of the whole prompt (see `gsr_train.readers.model.answer_loss`).

The full conversation (prompt messages + the assistant's target) goes through the base
model's chat template; the prompt part (the template with ``add_generation_prompt``) must be
a prefix of it, and its labels are -100, so only the answer tokens (and the template's
end-of-turn token, which teaches the model to stop) carry loss. Sequences longer than
``max_length`` are cut from the right (counted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from gsr_train.datamodules.triple_datamodule import FixedBatches, RankSampler, ResumeSkip
from gsr_train.readers.prompts import ReaderExample

log = logging.getLogger(__name__)
IGNORE = -100


def _ids(out) -> list[int]:
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def encode_example(tokenizer, ex: ReaderExample, max_length: int) -> tuple[list[int], list[int], bool]:
    """``(input_ids, labels, truncated)`` of one training example."""
    prompt = _ids(tokenizer.apply_chat_template(ex.messages, add_generation_prompt=True, tokenize=True))
    full = _ids(
        tokenizer.apply_chat_template(ex.messages + [{"role": "assistant", "content": ex.target}], tokenize=True)
    )
    if full[: len(prompt)] != prompt:  # template re-renders earlier turns: append the answer ourselves
        eos = tokenizer.eos_token_id
        full = prompt + tokenizer(ex.target, add_special_tokens=False)["input_ids"] + ([eos] if eos is not None else [])
    labels = [IGNORE] * len(prompt) + full[len(prompt) :]
    truncated = len(full) > max_length
    return full[:max_length], labels[:max_length], truncated


class ReaderDataset(Dataset):
    """Pre-tokenised examples (the whole split is small next to the model)."""

    def __init__(self, tokenizer, examples: Sequence[ReaderExample], max_length: int = 4096):
        self.items = []
        self.truncated = 0
        self.no_answer_tokens = 0
        for ex in examples:
            ids, labels, cut = encode_example(tokenizer, ex, max_length)
            self.truncated += int(cut)
            if all(v == IGNORE for v in labels):
                self.no_answer_tokens += 1
                continue
            self.items.append((ids, labels))
        if self.truncated or self.no_answer_tokens:
            log.warning(
                "reader data: %d of %d examples cut at %d tokens, %d dropped (no answer token left)",
                self.truncated,
                len(examples),
                max_length,
                self.no_answer_tokens,
            )

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.items[i]

    def token_stats(self) -> dict:
        lengths = torch.tensor([len(x[0]) for x in self.items], dtype=torch.float32)
        return {
            "examples": len(self.items),
            "mean_tokens": float(lengths.mean()) if len(lengths) else 0.0,
            "max_tokens": int(lengths.max()) if len(lengths) else 0,
            "truncated": self.truncated,
            "dropped_no_answer_tokens": self.no_answer_tokens,
        }


def collate(batch, pad_id: int):
    """Left-padded tensors (padding masked out of attention and labels) and ``answer_window``:
    how many trailing positions hold labels, so the LM head only runs where the loss is."""
    width = max(len(ids) for ids, _ in batch)
    n = len(batch)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    labels = torch.full((n, width), IGNORE, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    window = 1
    for i, (ids, lab) in enumerate(batch):
        start = width - len(ids)
        input_ids[i, start:] = torch.tensor(ids)
        labels[i, start:] = torch.tensor(lab)
        mask[i, start:] = 1
        first = next((j for j, v in enumerate(lab) if v != IGNORE), len(lab))
        window = max(window, len(lab) - first)
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels, "answer_window": torch.tensor(window)}


class ReaderCollate:
    """Positions of a dataset -> one left-padded batch (plus ``index``: the positions, so
    validation can merge per-example figures across DDP ranks without the sampler's repeats)."""

    def __init__(self, dataset: ReaderDataset, pad_id: int) -> None:
        self.dataset, self.pad_id = dataset, int(pad_id)

    def __call__(self, positions):
        batch = collate([self.dataset[int(i)] for i in positions], self.pad_id)
        batch["index"] = torch.as_tensor([int(i) for i in positions], dtype=torch.long)
        return batch


class ExampleBatches(pl.LightningDataModule):
    """Training batches of ``n`` examples of any kind (a reader's per-question items), made by
    ``collate(positions)``.

    The training order is a pure function of ``(seed, epoch)`` sharded by rank
    (`gsr_train.datamodules.triple_datamodule.RankSampler`): W DDP processes with batch B
    take the same examples per optimiser step as one process with batch ``W * B``, and a run
    resumed from a mid-epoch ``last.ckpt`` skips exactly the batches it had trained on.
    """

    def __init__(self, n: int, collate: Callable[[list[int]], Any], batch_size: int = 4, seed: int = 0):
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"reader batch_size must be >= 1, got {batch_size}")
        if n == 0:
            raise ValueError("the reader's training set is empty")
        self.n, self.collate, self.batch_size, self.seed = int(n), collate, int(batch_size), int(seed)

    def train_dataloader(self):

        sampler = RankSampler(self.n, self.seed)
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            sampler.set_epoch(int(trainer.current_epoch))
            batches = -(-len(sampler) // self.batch_size)
            sampler.resume = ResumeSkip(trainer, FixedBatches(batches), self.batch_size)
        return DataLoader(list(range(self.n)), batch_size=self.batch_size, sampler=sampler, collate_fn=self.collate)


class ReaderDataModule(ExampleBatches):
    """Training (and optional validation) batches of a causal-LM reader (see `ExampleBatches`)."""

    def __init__(
        self,
        dataset: ReaderDataset,
        pad_id: int,
        batch_size: int = 4,
        seed: int = 0,
        val_dataset: ReaderDataset | None = None,
        eval_batch_size: int | None = None,
    ):
        if batch_size >= 1 and len(dataset) == 0:
            raise ValueError("the reader's training set is empty (no example with an answer token)")
        super().__init__(len(dataset), ReaderCollate(dataset, pad_id), batch_size, seed)
        self.dataset, self.pad_id = dataset, int(pad_id)
        self.val_dataset = val_dataset
        self.eval_batch_size = int(eval_batch_size or batch_size)

    def val_dataloader(self):
        if self.val_dataset is None or len(self.val_dataset) == 0:
            return []
        return DataLoader(
            list(range(len(self.val_dataset))),
            batch_size=self.eval_batch_size,
            shuffle=False,
            collate_fn=ReaderCollate(self.val_dataset, self.pad_id),
        )
