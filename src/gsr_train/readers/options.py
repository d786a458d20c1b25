"""The reader run's options as typed dataclasses (``qa``: where the evidence comes from, how the reader
reads, trains and is scored; ``reader=``: the causal LM). Apart from the readers' code so that the
option checks (`gsr_train.options`) read them without torch; the reader runner
(`gsr_train.runs.reader`) and `gsr_train.readers.evidence` read a run's options through them."""

from __future__ import annotations

from dataclasses import dataclass

from gsr_train.config import option


@dataclass
class EvidenceSource:
    """One source of merged evidence (``qa.retrieval.sources``): the keys of ``qa.retrieval`` plus
    its label, how many lines it offers and its share of the prompt in tokens."""

    label: str | None = option(None, "the source's name in the prompt's bookkeeping (null: from the retriever)")
    checkpoint: str | None = option(None, "a SubgraphRAG .ckpt that retrieves the needed splits (cached)")
    results: dict = option({}, "or given results files: split -> results file (any retriever)")
    retriever: str | None = option(None, "or any registered retriever by name")
    options: dict | None = option(None, "that retriever's options")
    k: int | None = option(None, "triples kept per question when retrieving (null: qa.retrieval.k)", ge=1)
    top_k: int | None = option(None, "lines from this source (null: the run's top_k)", ge=1)
    share: int | None = option(None, "most prompt tokens from this source (null: no own bound)", ge=1)


@dataclass
class QARetrieval:
    checkpoint: str | None = option(None, "a SubgraphRAG .ckpt: retrieves the needed splits once (cached)")
    k: int = option(100, "triples kept per question when retrieving with the checkpoint", ge=1)
    results: dict = option(
        {"train": None, "validation": None, "test": None}, "or given results files: split -> file (any retriever)"
    )
    retriever: str | None = option(None, "or any registered retriever by name (cosine, classic-pcst, gsr, ...)")
    options: dict | None = option(None, "its options, e.g. {checkpoint: ...} for subgraphrag, {model: ...} for gsr")
    sources: list[EvidenceSource] | None = option(
        None, "or several sources merged into one prompt: a list of {label, retriever, options, k, top_k, share}"
    )


@dataclass
class QATrain:
    enabled: bool = option(True, "train the reader (false: only score the base model)")
    epochs: int = option(3, "training epochs (trainer.max_epochs follows this one)", ge=0)
    max_steps: int | None = option(None, "cap on optimiser steps (null: the epochs decide)", ge=1)
    batch_size: int = option(4, "prompts per optimiser step (the global batch, see batch_scope)", ge=1)
    accumulate: int = option(1, "gradient accumulation steps", ge=1)
    lr: float = option(2e-4, "AdamW's learning rate", gt=0)
    weight_decay: float = option(0.0, "AdamW's weight decay", ge=0)
    warmup_ratio: float = option(0.03, "share of the steps spent warming up", ge=0, le=1)
    gradient_clip_val: float = option(1.0, "gradient norm clipping", ge=0)
    max_length: int = option(4096, "longest training example in tokens", ge=1)
    no_evidence_fraction: float = option(0.0, "share of extra closed-book training copies", ge=0, le=1)
    require_answers: bool = option(True, "leave out training questions whose evidence holds no answer")
    log_every: int = option(10, "log every N steps", ge=1)


@dataclass
class QAVariants:
    base: list[str] = option(["none", "retrieved"], "evidence scored before training (or by a prompted reader)")
    finetuned: list[str] = option(["retrieved", "none"], "evidence scored after training / for eval_only")


@dataclass
class QAEval:
    batch_size: int = option(16, "prompts generated at once", ge=1)
    max_new_tokens: int = option(64, "most tokens per answer", ge=1)
    variants: QAVariants = option(QAVariants(), "which evidence each scoring pass reads: none | retrieved")


@dataclass
class QAReading:
    """How the run reads (``gsr_train.readers.registry``): the one key that chooses the reader, a
    registered reader's ``method`` or a class outside gsr-train (``_target_``), with its options."""

    method: str | None = option(
        "causal-lm", "the reader: causal-lm | prompted | retrieval-answers | a plugin's (null: causal-lm)"
    )
    _target_: str | None = option(None, "a reader class outside gsr-train (pkg.module.Class)")
    options: dict = option({}, "the reader's own options (its constructor's keyword arguments)")


@dataclass
class QARun:
    backend: str | None = option(
        None, "deprecated: qa.reading.method chooses the reader (backend=llm was method=prompted); warns once"
    )
    format: str = option(
        "subgraphrag", "prompt format: subgraphrag (ans: lines + 1 in-context example) | triples | paths"
    )
    max_prompt_tokens: int = option(4000, "whole chat-templated prompt; lowest-scored evidence dropped first", ge=1)
    icl: bool = option(True, "SubgraphRAG's in-context example (format=subgraphrag only)")
    train_split: str | None = option("train", "the split trained on")
    eval_split: str = option("test", "the split scored")
    limit: dict = option(
        {"train": None, "validation": None, "test": None}, "first N questions per split (smoke runs; null: all)"
    )
    threads: int | None = option(1, "torch threads (null: torch default)", ge=1)
    eval_only: str | None = option(None, "an adapter folder (<run>/adapter): skip training, score it")
    merge: bool = option(False, "also write <run>/merged: LoRA merged into a 16-bit copy of the base model")
    retrieval: QARetrieval = option(QARetrieval(), "where the evidence comes from")
    train: QATrain = option(QATrain(), "the (Q)LoRA fine-tuning")
    eval: QAEval = option(QAEval(), "generation and scoring")
    reading: QAReading = option(QAReading(), "which reader answers (qa.reading.method or qa.reading._target_)")


@dataclass
class LoRA:
    r: int = option(16, "LoRA rank", ge=1)
    alpha: int = option(16, "LoRA alpha", ge=1)
    dropout: float = option(0.05, "LoRA dropout", ge=0, le=1)
    target_modules: list[str] = option([], "the projections adapted (empty: peft's default for the model)")


@dataclass
class ReaderModel:
    name: str = option("smollm2", "the reader file's name (conf/reader/NAME.yaml)")
    model: str = option("smollm2", "'smollm2', a local HF folder, a .gguf file or a hub name")
    precision: str = option("bf16", "weights: 4bit (QLoRA: nf4 + double quant) | 8bit | bf16 | fp16 | fp32")
    compute_dtype: str = option("bf16", "compute dtype of the 4/8-bit layers")
    adapter: str = option("lora", "lora | full | none")
    lora: LoRA = option(LoRA(), "the LoRA adapter")
    gradient_checkpointing: bool = option(True, "recompute activations: less memory, ~45% more time per step")
    device_map: str | None = option(None, "e.g. auto / cuda:0 for quantised GPU loading")
