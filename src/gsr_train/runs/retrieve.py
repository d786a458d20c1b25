"""``+experiment=retrieve``: any retriever through one path. Built by name (the registry, entry
points of installed packages) or by ``retriever._target_``; scored by ``score(split)``; written,
measured and reported by :func:`report_retrieval`, which every retriever run can share."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
from omegaconf import DictConfig

from gsr_train.config import as_dict
from gsr_train.runs.common import (
    PreflightError,
    cache_dir,
    label_path,
    load_kg_index,
    output_dir,
    preflight,
    save_metrics,
)

log = logging.getLogger(__name__)


def run(cfg: DictConfig) -> dict[str, Any]:
    """Open the data, build the retriever, score the split, report it (a trainable one trains first)."""
    from gsr_train.retrievers.interface import RetrievalInputs
    from gsr_train.retrievers.registry import build, build_target, trainable
    from gsr_train.runs.train_retriever import run_trainable
    from gsr_train.text.embeddings import get_embeddings
    from gsr_train.text.encoders import load_encoder

    split, spec = str(cfg.split), cfg.retriever
    learner = trainable(spec.get("name"), spec.get("_target_"))
    if learner is not None:
        return run_trainable(cfg, learner)
    if cfg.get("eval_only"):
        raise PreflightError(f"eval_only={cfg.eval_only}: retriever {spec.get('_target_') or spec.name} is not trained")
    preflight(cfg, splits=[split], label_splits=[split], encoder=cfg.encoder)
    index = load_kg_index(cfg, evaluate=[split])
    encoder = load_encoder(as_dict(cfg.encoder))
    emb = get_embeddings(index, encoder, cache_dir(cfg), splits=[split])
    inputs = RetrievalInputs(index, emb.question[split], emb, index[split], split, encoder, cache_dir(cfg))
    options = as_dict(spec.options) if spec.get("options") is not None else {}
    retriever = (
        build_target(spec._target_, options, inputs) if spec.get("_target_") else build(spec.name, options, inputs)
    )
    t0 = time.perf_counter()
    scores, extra = retriever.score(index[split])
    seconds = time.perf_counter() - t0
    return report_retrieval(cfg, index, split, retriever.name, scores, {**extra, "score_seconds": round(seconds, 3)})


def report_retrieval(
    cfg: DictConfig,
    index: Any,
    split: str,
    method: str,
    scores: torch.Tensor,
    extra: dict[str, Any] | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the top-``top_k`` results file, measure recall at the run's K and ``eval_ks`` (with the
    shortest-path and, where the data has them, labelled triples), print the table and write
    metrics.json: what every retriever run ends with. ``extra``: the retriever's own figures (plain
    values kept); ``details``: the runner's, merged into metrics.json as they are."""
    from gsr_train.eval.labels import load_labelled_triples
    from gsr_train.eval.results import write_results
    from gsr_train.eval.retrieval import retrieval_metrics
    from gsr_train.eval.tail import results_file, retrieval_row
    from gsr_train.kg.paths import get_supervision

    graphs, k = index[split], int(cfg.top_k)
    if scores.shape != (graphs.edge_rel.numel(),):
        raise ValueError(
            f"retriever {method!r} returned {tuple(scores.shape)} scores for {graphs.edge_rel.numel()} edges"
        )
    results = results_file(output_dir(cfg), split)
    write_results(results, index, split, scores, k)
    sup = get_supervision(index, split, cache_dir(cfg))
    labelled = labelled_questions = label_stats = None
    labels = label_path(cfg, split)
    if labels:
        labelled, labelled_questions, label_stats = load_labelled_triples(labels, index, split)
    report = retrieval_metrics(
        graphs,
        scores,
        sorted({*map(int, cfg.eval_ks), k}),
        sp_label=sup.triple_label,
        labelled=labelled,
        labelled_questions=labelled_questions,
        hops=sup.hops,
    )
    print(report.table(f"{method} on {cfg.data.name} [{split}]", breakdowns=True))
    figures = {
        "method": method,
        "data": str(cfg.data.name),
        "split": split,
        "k": k,
        "questions": len(graphs),
        "labels": label_stats,
        "metrics": report.to_dict(),
        "results_path": str(results),
        "extra": {key: v for key, v in (extra or {}).items() if isinstance(v, (int, float, str, bool))},
        **(details or {}),
    }
    save_metrics(cfg, index.key, [retrieval_row(method, report, split, k, results=results)], figures)
    return figures
