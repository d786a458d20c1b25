"""The causal-LM reader (``qa.reading.method=causal-lm``, the default): a local HF model (``reader=...``)
reads prompts in ``qa.format`` and answers by greedy decoding; a run fine-tunes it with LoRA, QLoRA
or fully (`gsr_train.readers.model`), on answer tokens only (`gsr_train.readers.data`),
and saves the adapter folder (``qa.merge``: also the merged model)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gsr_train.memory import peak_rss_mb
from gsr_train.readers.data import ReaderDataModule, ReaderDataset
from gsr_train.readers.generate import generate_local
from gsr_train.readers.interface import Evidence, Question, Reading, ReadingInputs, TrainingParts
from gsr_train.readers.model import ReaderModule, count_parameters, load_reader, merge_and_export, save_adapter
from gsr_train.readers.prompts import ReaderExample, build_examples, parse_response, prompt_format

log = logging.getLogger(__name__)


class CausalLMReader:
    """A causal LM on this machine: loaded once (trainable when the run trains it, or with the trained
    adapter ``inputs.trained``), it answers every example of a variant in batches of ``qa.eval.batch_size``."""

    def __init__(self, inputs: ReadingInputs) -> None:
        m = inputs.model
        self.inputs, self.format = inputs, prompt_format(inputs.format)
        self.name = str(m["name"])
        self.variant = "finetuned" if inputs.trained else "base"  # an adapter given, or the untouched base model
        self.model, self.tokenizer, model_path = load_reader(
            m["model"],
            str(m["precision"]),
            str(m["compute_dtype"]),
            str(m["adapter"]),
            m.get("lora"),
            bool(m["gradient_checkpointing"]) and inputs.trains,
            adapter_path=inputs.trained or None,
            trainable=inputs.trains,
            cache_dir=inputs.cache_dir,
            device_map=m.get("device_map"),
            device=inputs.device or "cpu",
        )
        self.figures: dict[str, Any] = {"parameters": count_parameters(self.model), "model_path": model_path}
        self._module: ReaderModule | None = None
        self._dataset: ReaderDataset | None = None

    @property
    def budget(self) -> int | None:
        return int(self.inputs.max_prompt_tokens) if self.inputs.max_prompt_tokens else None

    def prepare(self, questions: Sequence[Question], evidence: Evidence) -> list[ReaderExample]:
        """Chat prompts in the run's format, cut to the token budget (lowest-scored evidence first)."""
        i = self.inputs
        return build_examples(questions, evidence, self.format, i.k, self.tokenizer, self.budget, i.icl)

    def answer(self, batch: Sequence[ReaderExample]) -> list[Reading]:
        ev = self.inputs.eval
        texts = generate_local(self.model, self.tokenizer, batch, int(ev["batch_size"]), int(ev["max_new_tokens"]))
        return [Reading(text, parse_response(text, self.format)) for text in texts]

    # ------------------------------------------------------------------ training
    def training(self, questions: Sequence[Question], evidence: Evidence, batch_size: int) -> TrainingParts:
        """The training prompts with their evidence (plus ``qa.train.no_evidence_fraction`` closed-book
        copies; those without answers left out unless ``qa.train.require_answers=false``), the module."""
        i, tr = self.inputs, self.inputs.train
        examples = self.prepare(questions, evidence)
        if tr.get("no_evidence_fraction"):
            # a share of closed-book copies so the reader also answers without evidence
            pick = np.random.default_rng(int(i.seed)).random(len(questions)) < float(tr["no_evidence_fraction"])
            chosen = [q for q, p in zip(questions, pick) if p]
            examples += build_examples(chosen, None, self.format, 0, self.tokenizer, self.budget, i.icl)
        if tr.get("require_answers", True):
            examples = [ex for ex in examples if ex.answers]
        self._dataset = ReaderDataset(self.tokenizer, examples, int(tr["max_length"]))
        self._module = ReaderModule(
            self.model,
            lr=float(tr["lr"]),
            weight_decay=float(tr["weight_decay"]),
            warmup_ratio=float(tr["warmup_ratio"]),
            log_every=int(tr.get("log_every", 10)),
        )
        dm = ReaderDataModule(self._dataset, self.tokenizer.pad_token_id, batch_size, int(i.seed))
        self.model.train()
        return TrainingParts(self._module, dm)

    def save(self, folder: Path) -> dict:
        """The adapter folder (and, ``qa.merge`` with LoRA, the merged model next to it); the figures."""
        module, dataset, m = self._module, self._dataset, self.inputs.model
        assert module is not None and dataset is not None, "save() comes after training()"
        self.model.eval()
        steps = np.asarray(module.step_seconds[1:] or module.step_seconds or [float("nan")])
        meta = {
            "base_model": str(m["model"]),
            "precision": str(m["precision"]),
            "adapter": str(m["adapter"]),
            "format": self.format.name,
            "k": self.inputs.k,
            "max_prompt_tokens": self.budget,
        }
        save_adapter(self.model, self.tokenizer, folder, meta)
        info: dict[str, Any] = {
            "step_s_median": float(np.median(steps)),
            "step_s_mean": float(np.mean(steps)),
            "loss_first10": float(np.mean(module.losses[:10])) if module.losses else None,
            "loss_last10": float(np.mean(module.losses[-10:])) if module.losses else None,
            "data": dataset.token_stats(),
            "adapter_dir": str(folder),
            "rss_mb_per_step": module.step_rss_mb,
            "peak_rss_mb": round(peak_rss_mb(), 1),
        }
        if self.inputs.merge and str(m["adapter"]) == "lora":
            merged = merge_and_export(
                str(m["model"]), folder, folder.parent / "merged", cache_dir=self.inputs.cache_dir
            )
            info["merged_dir"] = str(merged)
        return info
