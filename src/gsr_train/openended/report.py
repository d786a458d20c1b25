"""The open-ended evaluation's tables, metrics rows and the OKGQA-P plot (the paper's Figure 5)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gsr_train.eval.intervals import format_cell
from gsr_train.eval.markdown import markdown_table
from gsr_train.eval.tail import INTERVALS, metrics_row
from gsr_train.openended.stages import CRITERIA
from gsr_train.robustness.run import plot

SHORT = {"context_relevance": "G-Eval rel", "comprehensiveness": "comp", "correctness": "corr", "empowerment": "emp"}


def values(f: Mapping[str, Any]) -> dict[str, float | None]:
    """A condition's headline figures, flat (the metrics row and the plot read these names): shares,
    and G-Eval ratings on their 1-5 scale."""
    out: dict[str, float | None] = {}
    for v in ("encoder", "llm"):
        if f.get(v):
            out[f"factscore_{v}"] = f[v]["factscore"]
            out[f"factscore_no_penalty_{v}"] = f[v]["factscore_no_penalty"]
            out[f"hallucination_{v}"] = f[v]["hallucination_ratio"]
    if f.get("agreement"):
        out["verifier_agreement"] = f["agreement"]["agreement"]
    for crit, rating in (f.get("geval") or {}).items():
        out[f"geval_{crit}"] = rating
    return out


def condition_rows(
    figures: Mapping[str, Any], split: str, k: int, labels: Mapping[str, Mapping[str, Any]]
) -> list[dict]:
    """The tail's rows (`gsr_train.eval.tail`): one per condition, labelled by form (and
    perturbation and level in the grid)."""
    rows = []
    for label, f in figures.items():
        lab = dict(labels.get(label, {"form": label}))
        row = metrics_row(f"open_ended-{lab['form']}", split, k, values(f), condition=label, **lab)
        bounds = f.get(INTERVALS) or {}  # computed from the answers when the condition was judged
        rows.append({**row, INTERVALS: {n: b for n, b in bounds.items() if n in row["metrics"]}})
    return rows


def _f(v: Any, digits: int = 3, bounds: Any = None) -> str:
    return format_cell(v, bounds, digits)


def conditions_table(figures: Mapping[str, Any], title: str, labels: Mapping[str, Mapping] | None = None) -> str:
    """Markdown: per condition, answers, facts, FActScore and hallucination per verifier, their
    agreement, the G-Eval means (each with its 95% interval over the questions) and how the ratings
    were read."""
    crits = [c for c in CRITERIA if any(c in (f.get("geval") or {}) for f in figures.values())]
    head = ["condition", "answered", "facts/answer", "FActScore enc", "halluc. enc", "enc. support"]
    head += ["FActScore LLM", "halluc. LLM"]
    head += ["agreement", *(SHORT[c] for c in crits), "rated by"]
    rows = []
    for label, f in figures.items():
        v, b = values(f), f.get(INTERVALS) or {}
        rows.append(
            [
                label,
                f"{f['answered']}/{f['cases']}",
                _f(f.get("mean_facts"), 1),
                *(_f(v.get(n), 3, b.get(n)) for n in ("factscore_encoder", "hallucination_encoder")),
                _f(f.get("encoder_mean_support")),
                *(_f(v.get(n), 3, b.get(n)) for n in ("factscore_llm", "hallucination_llm", "verifier_agreement")),
                *(_f(v.get(f"geval_{c}"), 2, b.get(f"geval_{c}")) for c in crits),
                ", ".join(f"{m} {n}" for m, n in (f.get("geval_method") or {}).items()) or "-",
            ]
        )
    lines = [markdown_table(head, rows, f"Open-ended answers: {title}")]
    notes = [f"{label}: {line}" for label, f in figures.items() if (line := _not_scored(f.get("counts", {})))]
    if notes:
        lines += ["", "Not scored (counted per reason):", *(f"- {n}" for n in notes)]
    return "\n".join(lines)


def _not_scored(counts: Mapping[str, Mapping[str, int]]) -> str:
    """``stage reason n, ...; stage ...``: what a condition could not score, per stage (how ratings
    and verdicts were read is not a loss)."""
    parts = []
    for stage, c in counts.items():
        lost = [f"{k} {n}" for k, n in c.items() if n and not k.startswith(("rated_by", "verdict_by"))]
        if lost:
            parts.append(f"{stage} " + ", ".join(lost))
    return "; ".join(parts)


def grid_plot(
    figures: Mapping[str, Any], labels: Mapping[str, Mapping[str, Any]], path: str | Path, metric: str, title: str
) -> Path:
    """``metric`` against perturbation level, one panel per perturbation method, one line per form
    (through the robustness study's plot, so both studies draw alike)."""
    results = []
    for label, f in figures.items():
        lab = labels[label]
        if lab["form"] == "none":
            continue
        results.append(
            {
                "retriever": lab["form"],
                "method": lab["perturbation"],
                "level": lab["level"],
                metric: {
                    "all": {"0": {**values(f), "encoder_mean_support": f.get("encoder_mean_support")}.get(metric)}
                },
            }
        )
    methods = list(dict.fromkeys(r["method"] for r in results if r["method"] != "none"))
    return plot({"ks": [0], "methods": methods, "results": results}, path, metric, 0, title)
