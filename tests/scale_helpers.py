"""Tiny model kinds shared by the DDP / export / resume tests (one registry entry per model kind).

A kind builds, from a scratch folder, a fresh LightningModule (same initial weights for a
given seed) and a LightningDataModule whose per-device batch is a parameter.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from .conftest import compose_config, quiet
from .subgraphrag_toy import RELATIONS, write_toy

ENCODER = {"name": "hashing", "dim": 32}
SGR_MODEL = {"hidden": 32, "cos_features": True, "qr_product": True, "fused": False}
# a one-layer T5 of width 32: the GSR kind here and the open-head tests build the same tiny model
TINY_T5_CONFIG = {
    "d_model": 32,
    "d_ff": 64,
    "num_layers": 1,
    "num_decoder_layers": 1,
    "num_heads": 2,
    "d_kv": 16,
    "dropout_rate": 0.0,
}
GSR_TINY = {
    "name": "gsr_tiny",
    "family": "t5",
    "pretrained": None,
    "tokenizer": "minilm",
    "config": {**TINY_T5_CONFIG},
    "relation_init": "random",
    "max_source_length": 24,
}


class LossRecorder(pl.Callback):
    """Writes the global mean training loss of every optimiser step (rank 0) to a JSON file."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path, self.losses = str(path), []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"].detach().float() if isinstance(outputs, dict) else outputs.detach().float()
        loss = trainer.strategy.reduce(loss.clone(), reduce_op="mean")
        self.losses.append(float(loss))

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero:
            Path(self.path).write_text(json.dumps(self.losses))


# ---------------------------------------------------------------------------- SubgraphRAG
def subgraphrag_setup(root: Path, sizes=(32, 11, 6)) -> dict:
    from gsr_train.kg.index import get_index
    from gsr_train.kg.paths import get_supervision
    from gsr_train.text.embeddings import get_embeddings

    folder = write_toy(root / "data", sizes=sizes)
    cache = root / "cache"
    index = get_index(folder, cache_dir=cache)
    emb = get_embeddings(index, ENCODER, cache)
    sup = {s: get_supervision(index, s, cache) for s in index.splits}
    return {"index": index, "emb": emb, "sup": sup, "data": folder, "cache": cache}


def subgraphrag_module(ctx: dict, seed: int = 0):
    from gsr_train.models.subgraphrag.module import SubgraphRAGModule

    torch.manual_seed(seed)
    return SubgraphRAGModule(
        SGR_MODEL,
        ctx["emb"].dim,
        optim={"lr": 1e-2, "fused": False},
        val_k=10,
        seed=seed,
        meta={"encoder_name": ctx["emb"].encoder_name, "data": "toy"},
    )


def subgraphrag_datamodule(ctx: dict, batch: int, seed: int = 0, module=None):
    from gsr_train.datamodules.triple_datamodule import TripleDataModule
    from gsr_train.models.subgraphrag.scorer import ScorerConfig

    cfg = ScorerConfig.from_options(SGR_MODEL, ctx["emb"].dim)
    dm = TripleDataModule(
        ctx["index"], ctx["emb"], ctx["sup"], cfg.structure, graphs_per_batch=batch, seed=seed, eval_graphs_per_batch=2
    )
    if module is not None:
        module.validate_on(dm)  # what the recipe does: the datamodule hands the model its validation graphs
    return dm


def subgraphrag_val_reference(ctx: dict, module) -> dict[str, float]:
    """Validation recall of ``module``'s weights over the whole validation split, in this process."""
    from gsr_train.eval.retrieval import retrieval_metrics
    from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever

    split = ctx["index"]["validation"]
    scores = SubgraphRAGRetriever(module.scorer.eval()).score_split(
        split, ctx["emb"].question["validation"], ctx["emb"]
    )
    rep = retrieval_metrics(split, scores, [10], sp_label=ctx["sup"]["validation"].triple_label)
    return {"val/sp_recall@10": rep.overall["sp_recall"][10], "val/answer_recall@10": rep.overall["answer_recall"][10]}


# ---------------------------------------------------------------------------- GSR
def _gsr_questions(n: int, seed: int, prefix: str):
    import random

    from gsr_train.datamodules.gsr_data import ChainQuestion

    rng = random.Random(seed)
    rels = list(RELATIONS)
    out = []
    for i in range(n):
        first = rels[rng.randrange(len(rels))]
        chain = (first,) if i % 3 else (first, rels[rng.randrange(len(rels))])
        text = RELATIONS[first].format(f"Topic {prefix}{i}") + (" and then" if len(chain) > 1 else "")
        out.append(ChainQuestion(f"{prefix}-{i}", text, [chain], [chain]))
    return out


def gsr_setup(root: Path, sizes=(32, 11)) -> dict:
    return {
        "train": _gsr_questions(sizes[0], 1, "T"),
        "validation": _gsr_questions(sizes[1], 2, "V"),
        "relations": list(RELATIONS),
    }


def gsr_module(ctx: dict, seed: int = 0):
    from gsr_train.models.gsr.modeling import build_gsr_model
    from gsr_train.models.gsr.module import GSRModule

    torch.manual_seed(seed)
    gsr = build_gsr_model(GSR_TINY, ctx["relations"])
    return GSRModule(
        gsr,
        optim={"lr": 3e-3, "schedule": "constant", "weight_decay": 0.0},
        val_decode={"beams": 3, "top_n": 2, "max_hops": 2, "batch_size": 16},
    )


def gsr_datamodule(ctx: dict, batch: int, seed: int = 0, module=None):
    from gsr_train.datamodules.gsr_data import GSRDataModule, retrieval_items

    gsr = module.gsr
    train, _ = retrieval_items(ctx["train"], gsr.relations)
    val, _ = retrieval_items(ctx["validation"], gsr.relations, strict=False, require_targets=False)
    return GSRDataModule(
        gsr, train, [], val, schedule="retrieval", batch_size=batch, eval_batch_size=3, seed=seed
    ).as_lightning()


def gsr_val_reference(ctx: dict, module) -> dict[str, float]:
    """match@1 / match@n of ``module``'s weights over every validation question, in this process."""
    from gsr_train.models.gsr.decoding import beam_chains

    gsr = module.gsr.eval()
    qs = ctx["validation"]
    beams = beam_chains(gsr, [q.question for q in qs], module.val_decode)
    at1 = atn = 0
    for q, per_q in zip(qs, beams):
        names = [gsr.chain_names(b.chain) if b.chain is not None else None for b in per_q]
        ground = set(q.ground)
        at1 += bool(names[:1] and names[0] in ground)
        atn += any(c in ground for c in names[: module.val_decode.top_n] if c is not None)
    return {"val/match@1": at1 / len(qs), "val/match@n": atn / len(qs), "val/questions": float(len(qs))}


# ---------------------------------------------------------------------------- reader
READER_LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj", "o_proj", "down_proj"]}


def _reader_examples(n: int, prefix: str):
    from gsr_train.readers.prompts import ReaderExample

    out = []
    for i in range(n):
        lang = f"Language {prefix}{i}" + " English" * (4 * (i % 4))  # answers of 9 to ~30 tokens
        question = f"what language is spoken in country {prefix}{i}"
        messages = [
            {
                "role": "user",
                "content": f"Triples: (Country {prefix}{i}, languages_spoken, {lang}) Question: {question}",
            }
        ]
        out.append(ReaderExample(f"{prefix}-{i}", question, messages, f"ans: {lang}", [lang]))
    return out


def reader_setup(root: Path, sizes=(24, 6)) -> dict:
    from gsr_train.readers.data import ReaderDataset
    from gsr_train.readers.model import load_tokenizer

    from .test_reader_helpers import tiny_llama_folder

    folder = tiny_llama_folder(root / "tiny_llama")
    tok = load_tokenizer(str(folder))
    return {
        "folder": folder,
        "tokenizer": tok,
        "train": ReaderDataset(tok, _reader_examples(sizes[0], "tr"), 256),
        "validation": ReaderDataset(tok, _reader_examples(sizes[1], "va"), 256),
    }


def reader_module(ctx: dict, seed: int = 0):
    """LoRA on a tiny random LLaMA in fp32 (4-bit needs bitsandbytes kernels DDP on CPU does not get)."""
    from gsr_train.readers.model import ReaderModule, load_reader

    torch.manual_seed(seed)
    model, _, _ = load_reader(
        str(ctx["folder"]), "fp32", adapter="lora", lora=READER_LORA, gradient_checkpointing=False
    )
    return ReaderModule(model, lr=5e-3, warmup_ratio=0.0, log_every=0)


def reader_datamodule(ctx: dict, batch: int, seed: int = 0):
    from gsr_train.readers.data import ReaderDataModule

    return ReaderDataModule(
        ctx["train"],
        ctx["tokenizer"].pad_token_id,
        batch_size=batch,
        seed=seed,
        val_dataset=ctx["validation"],
        eval_batch_size=2,
    )


@torch.no_grad()
def reader_val_reference(ctx: dict, module) -> dict[str, float]:
    """Answer-token loss / accuracy of ``module``'s weights over every validation example, in this process."""
    from gsr_train.readers.data import collate
    from gsr_train.readers.model import answer_token_stats, val_figures

    model = module.model.eval()
    ds, pad = ctx["validation"], ctx["tokenizer"].pad_token_id
    rows = []
    for i in range(len(ds)):
        b = collate([ds[i]], pad)
        t, c, h = answer_token_stats(model, b["input_ids"], b["attention_mask"], b["labels"])
        rows.append((float(t), int(c), int(h)))
    return {f"val/{k}": v for k, v in val_figures(rows).items()}


def reader_run_inputs(root: Path) -> dict:
    """A 6 / 3 question RoG folder, its results files and a tiny LLaMA for ``runs/reader.py``."""
    from .test_reader_helpers import tiny_llama_folder
    from .test_reader_run import _rows, _write

    data = root / "data"
    data.mkdir()
    results = {}
    for split, rows in {"train": _rows("tr", 6), "test": _rows("te", 3)}.items():
        _write(data, split, rows)
        results[split] = root / f"results_{split}.jsonl"
        results[split].write_text("".join(json.dumps({"id": r["id"], "triples": r["graph"]}) + "\n" for r in rows))
    return {"root": root, "data": data, "results": results, "model": tiny_llama_folder(root / "tiny")}


def reader_run_config(inputs: dict, out: Path, *extra: str):
    """The composed config of a tiny fp32 LoRA reader run (last.ckpt after every step)."""

    results = inputs["results"]
    overrides = [
        "+experiment=reader_webqsp_mini",
        f"paths.output_dir={out}",
        f"paths.cache_dir={inputs['root'] / 'c'}",
        "experiment_name=test",
        *quiet(),
        "checkpoint_every_n_steps=1",
        f"data.dir={inputs['data']}",
        "data.splits=[train,test]",
        "data.labels={}",
        "reader=tiny_llama",
        f"reader.model={inputs['model']}",
        "reader.precision=fp32",
        "qa.format=triples",
        "top_k=2",
        "qa.max_prompt_tokens=400",
        f"qa.retrieval.results.train={results['train']}",
        f"qa.retrieval.results.test={results['test']}",
        "qa.train.lr=5e-3",
        "qa.eval.batch_size=3",
        "qa.eval.max_new_tokens=4",
        "qa.eval.variants.base=[]",
        "qa.eval.variants.finetuned=[retrieved]",
        *extra,
    ]
    return compose_config(overrides)


def reader_adapter(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(out / "adapter" / "adapter_model.safetensors")


KINDS: dict[str, dict[str, Callable[..., Any]]] = {
    "subgraphrag": {
        "setup": subgraphrag_setup,
        "module": subgraphrag_module,
        "datamodule": subgraphrag_datamodule,
        "val_reference": subgraphrag_val_reference,
        "weights": lambda m: m.scorer.state_dict(),
    },
    "gsr": {
        "setup": gsr_setup,
        "module": gsr_module,
        "datamodule": gsr_datamodule,
        "val_reference": gsr_val_reference,
        "weights": lambda m: m.gsr.state_dict(),
        "trainer": {"reload_dataloaders_every_n_epochs": 1},
    },  # as runs/gsr.py: items change per epoch
    # ReaderModule.state_dict() holds only what trains (the LoRA weights)
    "reader": {
        "setup": reader_setup,
        "module": reader_module,
        "datamodule": reader_datamodule,
        "val_reference": reader_val_reference,
        "weights": lambda m: m.state_dict(),
    },
}


def make_datamodule(kind: str, ctx: dict, batch: int, module=None):
    fn = KINDS[kind]["datamodule"]
    return fn(ctx, batch, module=module) if kind in ("gsr", "subgraphrag") else fn(ctx, batch)


def fit_on_cpu(kind: str, ctx: dict, module, root, batch: int, epochs: int, callbacks, fit=None, **options):
    """Fits ``module`` on the CPU, deterministic, with no logger, bar, summary or sanity check, warnings
    silenced: the one loop the DDP and resume tests compare; ``options`` go to the Trainer, ``fit`` to
    ``fit()``. The trainer."""
    import warnings

    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        deterministic=True,
        default_root_dir=str(root),
        callbacks=list(callbacks),
        **options,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, make_datamodule(kind, ctx, batch, module=module), **(fit or {}))
    return trainer


class KillAtStep(pl.Callback):
    """SIGKILLs its own process when a training batch starts at global step ``step`` (no cleanup)."""

    def __init__(self, step: int) -> None:
        self.step = int(step)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
