"""What every retriever run reports: recall at the run's K and the Ks people compare (shortest-path
and, where the data has them, labelled triples), the figures of metrics.json, and a node scorer's own
answer ranking. `gsr_train.runs.retrieval_report.report_retrieval` writes them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from gsr_train.eval.intervals import QuestionValues
from gsr_train.eval.labels import load_labelled_triples
from gsr_train.eval.qa import QAReport
from gsr_train.eval.retrieval import retrieval_metrics
from gsr_train.eval.retrieval_answers import answers_report


def measure(
    index: Any, split: str, scores: torch.Tensor, ks: Sequence[int], sup: Any, labels: str | Path | None, device: Any
) -> tuple[Any, Any]:
    """Recall at ``ks`` against the shortest-path triples (``sup``: the split's supervision) and, with
    a ``labels`` file, the labelled ones; with the labels' statistics."""
    labelled = labelled_questions = label_stats = None
    if labels:
        labelled, labelled_questions, label_stats = load_labelled_triples(labels, index, split)
    report = retrieval_metrics(
        index[split],
        scores,
        sorted({int(k) for k in ks}),
        sp_label=sup.triple_label,
        labelled=labelled,
        labelled_questions=labelled_questions,
        hops=sup.hops,
        device=device,
    )
    return report, label_stats


def check_scores(method: str, scores: torch.Tensor, graphs: Any) -> None:
    """A retriever must score every edge of the split once."""
    if scores.shape != (graphs.edge_rel.numel(),):
        raise ValueError(
            f"retriever {method!r} returned {tuple(scores.shape)} scores for {graphs.edge_rel.numel()} edges"
        )


def answer_ranking(graphs: Any, answers: list) -> QAReport:
    """QA metrics of the retriever's own top answer per question (a node scorer's ranking), each view's
    figures with their 95% bootstrap intervals (``to_dict()``: metrics.json's ``answer_ranking``)."""
    questions = [{"id": graphs.ids[i], "answers": list(graphs.answers[i])} for i in range(len(graphs))]
    rows = {graphs.ids[i]: {"answers": answers[i]} for i in range(len(graphs))}
    return answers_report(questions, rows, {}, n=1)


def top_answer_values(report: QAReport) -> QuestionValues:
    """The per-question hit of a node scorer's first answer, named as on its retrieval row
    (``top_answer_hit@1``), so that the row's interval and ``gsr-train compare`` read it."""
    values = report.question_values("all")
    return QuestionValues(values.ids, {"top_answer_hit@1": values.parts["hit@1"]})


def plain_values(extra: dict[str, Any] | None) -> dict[str, Any]:
    """A retriever's own figures that are plain values (numbers, strings, flags)."""
    return {key: v for key, v in (extra or {}).items() if isinstance(v, (int, float, str, bool))}
