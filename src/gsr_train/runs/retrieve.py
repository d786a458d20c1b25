"""``+experiment=retrieve``: any retriever through one path. Built by name (the registry, entry
points of installed packages) or by ``retriever._target_``; scored by ``score(split)``; written,
measured and reported by `report_retrieval`, which every retriever run can share. Trainable
ones train first: a triple scorer (`gsr_train.runs.train_retriever`) and GSR
(`gsr_train.runs.gsr.run_retriever`)."""

from __future__ import annotations

import logging
import time
from typing import Any

from omegaconf import DictConfig

from gsr_train.config import as_dict
from gsr_train.options.gsr_retrieve import on_retrieve_path
from gsr_train.options.preflight import check_retriever
from gsr_train.retrievers.interface import RetrievalInputs
from gsr_train.retrievers.registry import build, build_target, trainable
from gsr_train.runs import gsr
from gsr_train.runs.retrieval_report import report_retrieval
from gsr_train.runs.train_retriever import run_trainable
from gsr_train.runtime.device import run_device
from gsr_train.runtime.run_data import cache_dir, load_kg_index, run_encoder
from gsr_train.text.embeddings import get_embeddings

log = logging.getLogger(__name__)


def run(cfg: DictConfig) -> dict[str, Any]:
    """Open the data, build the retriever, score the split, report it (a trainable one trains first)."""
    split, spec = str(cfg.split), cfg.retriever
    learner = trainable(spec.get("name"), spec.get("_target_"))
    if learner is not None:
        return run_trainable(cfg, learner)
    if on_retrieve_path(cfg):  # GSR trains by a recipe of its own (a seq2seq model, not a triple scorer)
        return gsr.run_retriever(cfg)
    check_retriever(cfg, trained=False)
    index = load_kg_index(cfg, evaluate=[split])
    encoder = run_encoder(cfg)
    emb = get_embeddings(index, encoder, cache_dir(cfg), splits=[split])
    inputs = RetrievalInputs(
        index, emb.question[split], emb, index[split], split, encoder, cache_dir(cfg), run_device(cfg)
    )
    options = as_dict(spec.options) if spec.get("options") is not None else {}
    retriever = (
        build_target(spec._target_, options, inputs) if spec.get("_target_") else build(spec.name, options, inputs)
    )
    t0 = time.perf_counter()
    scores, extra = retriever.score(index[split])
    seconds = time.perf_counter() - t0
    return report_retrieval(cfg, index, split, retriever.name, scores, {**extra, "score_seconds": round(seconds, 3)})
