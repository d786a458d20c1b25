"""The one ending of every retriever run: the results file, recall at the run's K and at the Ks
people compare, the printed table and metrics.json (`report_retrieval`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from omegaconf import DictConfig

from gsr_train.eval.intervals import QuestionValues
from gsr_train.eval.results import write_results
from gsr_train.eval.retrieval_report import answer_ranking, check_scores, measure, plain_values, top_answer_values
from gsr_train.eval.tail import add_intervals, results_file, retrieval_row
from gsr_train.kg.paths import get_supervision
from gsr_train.retrievers.interface import ROW_FIELDS
from gsr_train.runtime.device import run_device
from gsr_train.runtime.run_data import cache_dir, label_path, output_dir, run_top_k, save_metrics


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
    row_values: QuestionValues | None = None,
) -> dict[str, Any]:
    """What every retriever run ends with: the top-``top_k`` results file, recall at the run's K and
    ``eval_ks`` (shortest-path and labelled triples), the table, metrics.json. ``extra``: the
    retriever's own figures and ``ROW_FIELDS``; ``details``: the runner's; ``row_metrics`` /
    ``row_labels`` / ``row_values``: its own figures on its row, beside recall (GSR's chain match)."""
    graphs, k = index[split], run_top_k(cfg)
    check_scores(method, scores, graphs)
    results, rows = _write(cfg, index, split, scores, extra)
    sup = get_supervision(index, split, cache_dir(cfg))
    report, label_stats = measure(index, split, scores, [*cfg.eval_ks, k], sup, label_path(cfg, split), run_device(cfg))
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
        "extra": plain_values(extra),
        **(details or {}),
    }
    row = retrieval_row(method, report, split, k, results=results, **dict(row_labels or {}))
    _own_answers(figures, row, graphs, rows)
    _own_figures(row, row_metrics, row_values)
    save_metrics(cfg, index.key, [row], figures)
    return figures


def _write(cfg: DictConfig, index: Any, split: str, scores: torch.Tensor, extra: dict[str, Any] | None):
    """The top-``top_k`` results file (with the retriever's per-question fields, ``ROW_FIELDS``:
    a chain retriever's chains, a GNN's answers); its path and those fields but the chains."""
    rows = dict((extra or {}).get(ROW_FIELDS) or {})
    chains = rows.pop("chains", None)  # a chain retriever's kept chains: the results format's own field
    results = results_file(output_dir(cfg), split)
    write_results(results, index, split, scores, run_top_k(cfg), chains=chains, extra=rows or None)
    return results, rows


def _own_answers(figures: dict[str, Any], row: dict[str, Any], graphs: Any, rows: Mapping[str, Any]) -> None:
    """A node scorer's own answer ranking (its results rows' ``answers``), printed (each figure with its
    interval) and kept; its first answer's hit also on its row (so gsr-train compare pairs it)."""
    if not rows or rows.get("answers") is None:
        return
    report = answer_ranking(graphs, rows["answers"])
    figures["answer_ranking"] = report.to_dict()
    print(report.table("its own answers (top 1), QA metrics in % (95% interval)"))
    row["metrics"]["top_answer_hit@1"] = report.flat()["hit@1"]
    add_intervals(row, top_answer_values(report))


def _own_figures(row: dict[str, Any], metrics: Mapping[str, Any] | None, values: QuestionValues | None) -> None:
    """The retriever's own figures on its row, with the intervals of those it gave per-question values."""
    row["metrics"].update({name: float(v) for name, v in (metrics or {}).items() if isinstance(v, (int, float))})
    if values is not None:
        add_intervals(row, values)
