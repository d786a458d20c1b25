"""Two runs on the questions they share: each metric's paired difference, its interval and p-value.

Every run folder keeps its rows' per-question values in ``questions.jsonl`` (`gsr_train.eval.tail`).
A row of run A is paired with the first row of run B of the same split and kind (the labels ``mode``,
``variant``, ``perturbation``, ``level``: GSR's decoding mode, a reader's variant); the methods may
differ (that is usually the point). For each pair, every metric both rows measure is compared on the
questions both have (`gsr_train.eval.intervals.paired_difference`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gsr_train.eval.intervals import RESAMPLES, SEED, QuestionValues, format_estimate, paired_difference
from gsr_train.eval.tail import METRICS_FILE, read_metrics, read_question_values

KIND_LABELS = ("mode", "variant", "perturbation", "level")  # what tells two rows of one run apart


def _key(labels: Mapping[str, Any]) -> tuple:
    return (labels.get("split"), *(labels.get(k) for k in KIND_LABELS))


def _name(labels: Mapping[str, Any]) -> str:
    extra = [str(labels[k]) for k in KIND_LABELS if labels.get(k) is not None]
    return " ".join([str(labels.get("method")), *extra, f"[{labels.get('split')}]"])


def pair_rows(
    a: Sequence[tuple[dict, QuestionValues]], b: Sequence[tuple[dict, QuestionValues]]
) -> list[tuple[dict, dict, QuestionValues, QuestionValues]]:
    """Each row of ``a`` with the first unused row of ``b`` of the same split and kind."""
    used: set[int] = set()
    pairs = []
    for labels_a, values_a in a:
        for j, (labels_b, values_b) in enumerate(b):
            if j not in used and _key(labels_a) == _key(labels_b):
                used.add(j)
                pairs.append((labels_a, labels_b, values_a, values_b))
                break
    return pairs


def compare_runs(run_a: str | Path, run_b: str | Path, resamples: int = RESAMPLES, seed: int = SEED) -> dict:
    """The comparison document: both runs, and per paired row its shared questions and each metric's
    ``{metric, questions, a, b, diff, low, high, p_value}``. A run without per-question values, or two
    runs with no row or question in common, is a ValueError / FileNotFoundError naming why."""
    check_same_data(run_a, run_b)
    rows_a, rows_b = read_question_values(run_a), read_question_values(run_b)
    pairs = pair_rows(rows_a, rows_b)
    if not pairs:
        kinds_a = sorted({_name(r) for r, _ in rows_a})
        kinds_b = sorted({_name(r) for r, _ in rows_b})
        raise ValueError(f"{run_a} and {run_b} have no rows of the same split and kind ({kinds_a} vs {kinds_b})")
    out = []
    for labels_a, labels_b, values_a, values_b in pairs:
        diffs = paired_difference(values_a, values_b, resamples, seed)
        out.append(
            {
                "a": _name(labels_a),
                "b": _name(labels_b),
                "row_a": labels_a.get("row"),  # the rows' places in each run's metrics.json
                "row_b": labels_b.get("row"),
                "split": labels_a.get("split"),
                "questions": diffs[0].questions if diffs else 0,
                "metrics": [d.to_dict() for d in diffs],
            }
        )
    if not any(r["questions"] for r in out):
        raise ValueError(f"{run_a} and {run_b} share no question (different data or splits?)")
    return {
        "run_a": str(run_a),
        "run_b": str(run_b),
        "resamples": int(resamples),
        "seed": int(seed),
        "interval": "95% paired bootstrap percentile interval of a - b",
        "p_value": "two-sided paired permutation test (each question's two values swapped at random)",
        "rows": out,
    }


def _dataset(run: str | Path) -> tuple[str | None, str | None]:
    path = Path(run) / METRICS_FILE
    doc = read_metrics(path) if path.is_file() else {}
    data = doc.get("dataset") or {}
    return data.get("name"), data.get("fingerprint")


def check_same_data(run_a: str | Path, run_b: str | Path) -> None:
    """Question ids pair questions only within one dataset: two runs whose data differ in both name and
    fingerprint (OKGQA's ``0..N`` ids beside another set's) are a ValueError naming both."""
    (name_a, print_a), (name_b, print_b) = _dataset(run_a), _dataset(run_b)
    if name_a and name_b and print_a and print_b and name_a != name_b and print_a != print_b:
        raise ValueError(
            f"{run_a} ran on {name_a} (data {print_a}), {run_b} on {name_b} (data {print_b}): "
            "their question ids do not name the same questions"
        )


def compare_table(doc: Mapping[str, Any], digits: int = 3) -> str:
    """One markdown table: per paired row and metric, both figures, ``a - b (low to high)`` and p."""
    lines = [
        f"A: {doc['run_a']}",
        f"B: {doc['run_b']}",
        "",
        "| A | B | metric | questions | A | B | A - B (95% CI) | p |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in doc["rows"]:
        for m in row["metrics"]:
            diff = format_estimate(m["diff"], m["low"], m["high"], digits)
            a, b = (format_estimate(m[x], None, None, digits) for x in ("a", "b"))
            p = "-" if m["p_value"] is None else f"{m['p_value']:.{digits}f}" if m["p_value"] >= 0.001 else "<0.001"
            lines.append(f"| {row['a']} | {row['b']} | {m['metric']} | {m['questions']} | {a} | {b} | {diff} | {p} |")
    return "\n".join(lines)
