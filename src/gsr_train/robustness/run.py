"""The robustness command: perturb the test graphs, re-run trained retrievers, report recall.

``python train.py +experiment=robustness_webqsp_mini [robustness.retrievers.subgraphrag.checkpoint=...]
[robustness.retrievers.gsr.model=...]`` (or ``robustness_quickstart`` on the embedded data).
Nothing is trained except the triple plausibility scorer (cached; ATS and relation
replacement need it). For every perturbation method and level (plus the unperturbed
graph, level 0) it

1. perturbs the split (`gsr_train.robustness.perturb.perturb`, one seed);
2. measures SC2D / SD2 / ATS against the original;
3. scores the perturbed graphs with every configured retriever and computes answer recall
   and shortest-path triple recall at every K.

Metrics on a perturbed graph are measured against the *original* gold: answer recall over
the question's answer entities (they stay in the graph; one whose edges were all deleted or
rewired away cannot be covered and counts as a miss), and shortest-path recall over the
original gold shortest-path edges that survive unchanged (questions whose gold edges were
all destroyed are left out of that average). Questions whose gold evidence was changed
("touched") are always reported apart from the others.

Writes ``robustness.md`` (tables), ``metrics.json`` (every figure) and one PNG per metric
(recall against level, one panel per perturbation) into the run folder.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from gsr_train.eval.intervals import QuestionValues, format_cell
from gsr_train.eval.markdown import markdown_table
from gsr_train.eval.retrieval import retrieval_metrics
from gsr_train.eval.schema import RECALL_KS
from gsr_train.eval.tail import METRICS_FILE, read_metrics
from gsr_train.io import atomic_write
from gsr_train.kg.index import SplitGraphs
from gsr_train.robustness.perturb import METHODS, perturb
from gsr_train.robustness.similarity import similarity

log = logging.getLogger(__name__)


GROUPS = ("all", "touched", "untouched")


def score_condition(
    split: SplitGraphs, scores: torch.Tensor, ks: Sequence[int], sp_label: torch.Tensor, touched_q: torch.Tensor
) -> dict:
    """Recall at every K, overall and for questions with / without touched gold evidence, each with its
    95% bootstrap interval over questions (``intervals: {K: [low, high]}``; one resampling for all)."""
    rep = retrieval_metrics(split, scores, list(ks), sp_label=sp_label)
    members = {"all": torch.ones(len(split), dtype=torch.bool), "touched": touched_q, "untouched": ~touched_q}
    values = QuestionValues(list(rep.ids))
    for m in ("answer_recall", "sp_recall"):
        per_q = rep.per_question[m].double()
        for group in GROUPS:
            inside = members[group].unsqueeze(1).to(per_q.device)
            masked = torch.where(inside, per_q, torch.full_like(per_q, math.nan))
            for j, k in enumerate(rep.ks):
                values.add_mean(f"{m}|{group}@{k}", masked[:, j].numpy())
    figures, bounds = values.values(), values.intervals()
    out: dict[str, Any] = {}
    for m in ("answer_recall", "sp_recall"):
        for group in GROUPS:
            n = int((~torch.isnan(rep.per_question[m][:, 0]) & members[group]).sum())
            keys = {str(k): f"{m}|{group}@{k}" for k in rep.ks}
            out.setdefault(m, {})[group] = {
                "n": n,
                **{k: figures[name] for k, name in keys.items()},
                "intervals": {k: list(b) for k, name in keys.items() if (b := bounds[name]) is not None},
            }
    return out


def evaluate_robustness(
    split: SplitGraphs,
    retrievers: Mapping[str, Callable],
    gold: torch.Tensor,
    methods: Sequence[str] = METHODS,
    levels: Sequence[float] = (0.2, 0.4, 0.6, 0.8, 1.0),
    ks: Sequence[int] = RECALL_KS,
    seed: int = 0,
    protect_gold: bool = False,
    scorer=None,
) -> dict:
    """Every figure of the robustness study (see the module docstring) as a JSON-ready dict."""
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"robustness.methods: unknown perturbation {m!r} (known: {METHODS})")
    conditions = [("none", 0.0)] + [(m, float(lv)) for m in methods for lv in levels if float(lv) > 0]
    rows, sims = [], []
    timings: dict[str, float] = {}
    for method, level in conditions:
        t0 = time.perf_counter()
        if method == "none":
            pert = perturb(split, "delete", 0.0, seed)
        else:
            pert = perturb(split, method, level, seed, protect=gold if protect_gold else None, scorer=scorer)
        sim = similarity(split, pert.split, scorer)
        touched_q = pert.questions_touched(gold, split)
        sp_label = pert.surviving(gold)
        key = f"perturb+similarity {method}"
        timings[key] = timings.get(key, 0.0) + time.perf_counter() - t0
        sims.append(
            {
                **pert.summary(),
                "method": method,
                "level": level,
                **sim.to_dict(),
                "questions_gold_touched": int(touched_q.sum()),
                "questions": len(split),
            }
        )
        log.info(
            "%s@%.1f: changed %.3f of edges, SC2D %.4f SD2 %.4f ATS %s, gold touched in %d questions",
            method,
            level,
            sims[-1]["changed_fraction"],
            sim.sc2d,
            sim.sd2,
            "-" if sim.ats is None else f"{sim.ats:.4f}",
            int(touched_q.sum()),
        )
        for name, fn in retrievers.items():
            t0 = time.perf_counter()
            scores, extra = fn(pert.split)
            figures = score_condition(pert.split, scores, ks, sp_label, touched_q)
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0
            rows.append({"retriever": name, "method": method, "level": level, **figures, "extra": extra})
    return {
        "ks": list(ks),
        "methods": list(methods),
        "levels": [float(x) for x in levels],
        "seed": seed,
        "protect_gold": bool(protect_gold),
        "similarity": sims,
        "results": rows,
        "timings": {k: round(v, 2) for k, v in timings.items()},
    }


# --------------------------------------------------------------------------- report


def _f(v: float | None, digits: int = 4, group: Mapping[str, Any] | None = None, k: str | None = None) -> str:
    """A figure; with the ``group`` it comes from and its ``k``, with the group's interval at ``k``."""
    if isinstance(v, float) and math.isnan(v):
        return "-"
    bounds = ((group or {}).get("intervals") or {}).get(k) if k is not None else None
    return format_cell(v, bounds, digits)


def _md(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str | None = None) -> str:
    return markdown_table(headers, rows, title, left=3)


def report_tables(figures: Mapping[str, Any], report_k: int = 100) -> str:
    """Markdown: KG similarity per condition, recall per retriever x condition, touched vs untouched."""
    ks = [str(k) for k in figures["ks"]]
    rk = str(report_k) if str(report_k) in ks else ks[-1]
    sim_rows = [
        [
            s["method"],
            f"{s['level']:.1f}",
            _f(s["changed_fraction"], 3),
            f"{s['questions_gold_touched']}/{s['questions']}",
            _f(s["sc2d"]),
            _f(s["sd2"]),
            _f(s["ats"]),
        ]
        for s in figures["similarity"]
    ]
    out = [
        _md(
            ["perturbation", "level", "edges changed", "questions gold touched", "SC2D", "SD2", "ATS"],
            sim_rows,
            "KG similarity to the original",
        )
    ]
    has_valid = any(r["extra"] for r in figures["results"])
    head = ["retriever", "perturbation", "level"] + [f"ans@{k}" for k in ks] + [f"sp@{k}" for k in ks] + ["sp n"]
    extra_keys = sorted({k for r in figures["results"] for k in r["extra"]}) if has_valid else []
    head += extra_keys
    rows = []
    for r in figures["results"]:
        a, s = r["answer_recall"]["all"], r["sp_recall"]["all"]
        rows.append(
            [r["retriever"], r["method"], f"{r['level']:.1f}"]
            + [_f(a[k], 4, a, k) for k in ks]
            + [_f(s[k], 4, s, k) for k in ks]
            + [str(s["n"])]
            + [_f(r["extra"].get(k)) for k in extra_keys]
        )
    out.append(
        _md(
            head,
            rows,
            "Answer recall@K and shortest-path triple recall@K (all questions; sp over the "
            "surviving gold edges of `sp n` questions)",
        )
    )
    head = [
        "retriever",
        "perturbation",
        "level",
        "n touched",
        f"ans@{rk} touched",
        f"ans@{rk} untouched",
        f"sp@{rk} touched",
        f"sp@{rk} untouched",
    ]
    rows = []
    for r in figures["results"]:
        a, s = r["answer_recall"], r["sp_recall"]
        rows.append(
            [
                r["retriever"],
                r["method"],
                f"{r['level']:.1f}",
                str(a["touched"]["n"]),
                _f(a["touched"][rk], 4, a["touched"], rk),
                _f(a["untouched"][rk], 4, a["untouched"], rk),
                _f(s["touched"][rk], 4, s["touched"], rk),
                _f(s["untouched"][rk], 4, s["untouched"], rk),
            ]
        )
    out.append(_md(head, rows, f"Questions whose gold shortest-path evidence was changed (touched) vs not, K={rk}"))
    return "\n\n".join(out)


def plot(
    figures: Mapping[str, Any], path: str | Path, metric: str = "answer_recall", k: int = 100, title: str | None = None
) -> Path:
    """Recall@k against level, one panel per perturbation, one line per retriever (PNG)."""
    import matplotlib  # lazy: matplotlib is only needed to draw plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib is only needed to draw plots

    ks = [str(x) for x in figures["ks"]]
    kk = str(k) if str(k) in ks else ks[-1]
    methods = figures["methods"]
    names = list(dict.fromkeys(r["retriever"] for r in figures["results"]))
    base = {r["retriever"]: r[metric]["all"][kk] for r in figures["results"] if r["method"] == "none"}
    fig, axes = plt.subplots(1, len(methods), figsize=(4 * len(methods), 3.6), sharey=True, squeeze=False)
    for ax, m in zip(axes[0], methods):
        for name in names:
            pts = sorted(
                (r["level"], r[metric]["all"][kk])
                for r in figures["results"]
                if r["retriever"] == name and r["method"] == m
            )
            xs = [0.0] + [p[0] for p in pts]
            ys = [base.get(name)] + [p[1] for p in pts]
            ax.plot(xs, [float("nan") if y is None else y for y in ys], marker="o", label=name)
        ax.set_title(m)
        ax.set_xlabel("perturbation level")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"{metric.replace('_', ' ')}@{kk}")
    axes[0][-1].legend(fontsize=7, loc="lower left")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
    return path


def render(folder: str | Path, report_k: int = 100) -> str:
    """Rewrite ``robustness.md`` and the PNGs of a run folder from its ``metrics.json``."""
    folder = Path(folder)
    figures = read_metrics(folder / METRICS_FILE)
    figures["data"] = (figures.get("dataset") or {}).get("name")
    tables = report_tables(figures, report_k)
    title = (
        f"{figures.get('data')} [{figures.get('split')}], {figures.get('questions')} questions, "
        f"seed {figures.get('seed')}" + (", gold protected" if figures.get("protect_gold") else "")
    )
    with atomic_write(folder / "robustness.md", "w") as f:
        f.write(f"# Robustness: {title}\n\n{tables}\n")
    for m in ("answer_recall", "sp_recall"):
        plot(figures, folder / f"robustness_{m}.png", m, report_k, title)
    return tables
