"""The one ending of every retriever run: the results file, recall at the run's K and at the Ks
people compare, the printed table and metrics.json (:func:`report_retrieval`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from omegaconf import DictConfig

from gsr_train.eval.labels import load_labelled_triples
from gsr_train.eval.results import write_results
from gsr_train.eval.retrieval import retrieval_metrics
from gsr_train.eval.retrieval_answers import answers_report
from gsr_train.eval.tail import results_file, retrieval_row
from gsr_train.kg.paths import get_supervision
from gsr_train.retrievers.interface import ROW_FIELDS
from gsr_train.runs.run_data import cache_dir, label_path, output_dir, save_metrics
from gsr_train.runtime.device import run_device


def _answer_ranking(graphs: Any, answers: list) -> dict[str, Any]:
    """QA metrics of the retriever's own top answer per question (a node scorer's ranking)."""
    questions = [{"id": graphs.ids[i], "answers": list(graphs.answers[i])} for i in range(len(graphs))]
    rows = {graphs.ids[i]: {"answers": answers[i]} for i in range(len(graphs))}
    return answers_report(questions, rows, {}, n=1).to_dict()


def report_retrieval(
    cfg: DictConfig,
    index: Any,
    split: str,
    method: str,
    scores: torch.Tensor,
    extra: dict[str, Any] | None = None,
    details: dict[str, Any] | None = None,
    row_metrics: Mapping[str, Any] | None = None,
    row_labels: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the top-``top_k`` results file, measure recall at the run's K and ``eval_ks`` (with the
    shortest-path and, where the data has them, labelled triples), print the table and write
    metrics.json: what every retriever run ends with. ``extra``: the retriever's own figures (plain
    values kept; its ``ROW_FIELDS``: per-question fields of the results rows, ``chains`` among them);
    ``details``: the runner's, merged into metrics.json as they are; ``row_metrics`` /
    ``row_labels``: the retriever's own figures and labels on its metrics.json row, beside recall
    (GSR's chain match)."""
    graphs, k = index[split], int(cfg.top_k)
    if scores.shape != (graphs.edge_rel.numel(),):
        raise ValueError(
            f"retriever {method!r} returned {tuple(scores.shape)} scores for {graphs.edge_rel.numel()} edges"
        )
    rows = dict((extra or {}).get(ROW_FIELDS) or {})  # per-question fields of the results rows (a GNN's answers)
    chains = rows.pop("chains", None)  # a chain retriever's kept chains: the results format's own field
    results = results_file(output_dir(cfg), split)
    write_results(results, index, split, scores, k, chains=chains, extra=rows or None)
    report, label_stats = _measure(cfg, index, split, scores, k)
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
    if rows and rows.get("answers") is not None:
        figures["answer_ranking"] = _answer_ranking(graphs, rows["answers"])
        print(f"its own answers (top 1): {figures['answer_ranking']['all']['metrics']}")
    row = retrieval_row(method, report, split, k, results=results, **dict(row_labels or {}))
    row["metrics"].update({name: float(v) for name, v in (row_metrics or {}).items() if isinstance(v, (int, float))})
    save_metrics(cfg, index.key, [row], figures)
    return figures


def _measure(cfg: DictConfig, index: Any, split: str, scores: torch.Tensor, k: int) -> tuple[Any, Any]:
    """Recall at the run's K and ``eval_ks`` against the shortest-path triples and, where the data has
    them, the labelled ones; with the labels' statistics."""
    sup = get_supervision(index, split, cache_dir(cfg))
    labelled = labelled_questions = label_stats = None
    labels = label_path(cfg, split)
    if labels:
        labelled, labelled_questions, label_stats = load_labelled_triples(labels, index, split)
    report = retrieval_metrics(
        index[split],
        scores,
        sorted({*map(int, cfg.eval_ks), k}),
        sp_label=sup.triple_label,
        labelled=labelled,
        labelled_questions=labelled_questions,
        hops=sup.hops,
        device=run_device(cfg),
    )
    return report, label_stats
