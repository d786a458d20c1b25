"""A trained retriever beside its baselines: the recall table overall and by hop count, and where it
wins (SubgraphRAG next to the cosine baseline scored in the same run)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gsr_train.eval.intervals import format_cell
from gsr_train.eval.markdown import markdown_table
from gsr_train.eval.retrieval import comparison_table

METRICS = ("answer_recall", "sp_recall", "labelled_recall")


def hop_table(reports: Mapping[str, Any], ks: Sequence[int], metrics: Sequence[str] = METRICS, digits: int = 3) -> str:
    """Markdown: one row per (hop group, model), columns metric@K with their 95% intervals (groups with
    questions only)."""
    groups: list[str] = []
    for rep in reports.values():
        rep.intervals  # noqa: B018 (fills each group's intervals)
        groups += [g for g in rep.by_hops if g not in groups]
    metrics = [m for m in metrics if any(m in r.overall for r in reports.values())]
    headers = ["hops", "questions", "model"] + [f"{m}@{k}" for m in metrics for k in ks]
    rows = []
    for g in groups:
        for name, rep in reports.items():
            gm = rep.by_hops.get(g)
            if gm is None:
                continue
            cells = [
                format_cell(gm.overall.get(m, {}).get(k), gm.intervals.get(m, {}).get(k), digits)
                for m in metrics
                for k in ks
            ]
            rows.append([g, str(gm.questions), name, *cells])
    return markdown_table(headers, rows, left=3)


def wins(model: Any, baseline: Any, ks: Sequence[int], metrics: Sequence[str] = METRICS) -> dict[str, dict[int, bool]]:
    """Per metric and K: does ``model`` beat ``baseline`` (strictly)?"""
    out: dict[str, dict[int, bool]] = {}
    for m in metrics:
        if m in model.overall and m in baseline.overall:
            out[m] = {k: (model.overall[m][k] or 0.0) > (baseline.overall[m][k] or 0.0) for k in ks}
    return out


def comparison_tables(reports: Mapping[str, Any], ks: Sequence[int], model: str, title: str) -> tuple[str, str]:
    """``(overall table, by-hop table)`` of ``reports`` (``{name: RetrievalReport}``), the metrics
    ``model``'s report has."""
    metrics = [m for m in METRICS if m in reports[model].overall]
    table = comparison_table(reports, ks=ks, metrics=metrics, title=title, digits=4)
    return table, hop_table(reports, ks)


def at_k(report: Any, k: int) -> dict[str, Any]:
    """``{"k": k, metric: value at k}`` of a report measured at ``k``."""
    return {"k": k, **{m: report.overall[m][k] for m in METRICS if m in report.overall}}
