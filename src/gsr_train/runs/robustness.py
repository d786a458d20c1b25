"""Runner of the OKGQA-P robustness study (``runner: robustness``; ``gsr-train robustness`` runs it
without train.py, `gsr_train.commands.robustness`).
The study itself (perturbations, scoring, tables, plots) lives in `gsr_train.robustness`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gsr_train.config import plain
from gsr_train.eval.tail import INTERVALS, metrics_row
from gsr_train.io import atomic_write
from gsr_train.kg.paths import get_supervision
from gsr_train.robustness.kge import get_scorer
from gsr_train.robustness.retrievers import build_retrievers
from gsr_train.robustness.run import evaluate_robustness, plot, report_tables
from gsr_train.runtime.device import run_device
from gsr_train.runtime.run_data import cache_dir, encoder_options, load_kg_index, output_dir, run_top_k, save_metrics
from gsr_train.text.embeddings import get_embeddings

CONF = str(Path(__file__).resolve().parents[3] / "conf")


@dataclass
class _Study:
    """What the stages of one robustness run share: the split studied (its first
    ``robustness.max_questions``), its gold evidence, the KGE scorer and the retrievers."""

    split_name: str
    index: Any
    split: Any
    gold: Any
    scorer: Any
    retrievers: dict


def run(cfg) -> dict:
    """Hydra runner (``runner: robustness``)."""
    rc = cfg.robustness
    torch.set_num_threads(int(rc.get("threads") or 1))
    t0 = time.perf_counter()
    s = _prepare(cfg)
    prep = time.perf_counter() - t0
    figures = evaluate_robustness(
        s.split,
        s.retrievers,
        s.gold,
        list(rc.methods),
        list(rc.levels),
        list(cfg.eval_ks),
        int(rc.seed),
        bool(rc.protect_gold),
        s.scorer,
    )
    figures.update(
        {
            "experiment": cfg.get("experiment_name"),
            "data": cfg.data.name,
            "split": s.split_name,
            "questions": len(s.split),
            "edges": int(s.split.edge_ptr[-1]),
            "retrievers": list(s.retrievers),
            "kge": s.scorer.meta,
            "prep_seconds": round(prep, 2),
            "total_seconds": round(time.perf_counter() - t0, 2),
        }
    )
    _report(cfg, s, figures)
    return figures


def _prepare(cfg) -> _Study:
    """The split, its gold shortest-path triples, its embeddings, the KGE scorer and the retrievers."""
    rc = cfg.robustness
    split_name = cfg.get("split", "test")
    index = load_kg_index(cfg, evaluate=[split_name])
    split = index[split_name]
    sup = get_supervision(index, split_name, cache_dir(cfg))
    gold = sup.triple_label
    emb = get_embeddings(index, encoder_options(cfg), cache_dir(cfg), splits=[split_name])
    q_emb = emb.question[split_name]
    if rc.get("max_questions"):
        n = min(int(rc.max_questions), len(split))
        gold = gold[: int(split.edge_ptr[n])]
        split, q_emb = split.subset(range(n)), q_emb[:n]
    scorer = get_scorer(split, len(index.relations), plain(rc.kge), cache_dir(cfg))
    retrievers = build_retrievers(
        plain(rc.retrievers),
        index,
        split,
        q_emb,
        emb,
        plain(cfg.get("classic")),
        split_name,
        encoder_options(cfg),
        cache_dir(cfg),
        run_device(cfg),
    )
    return _Study(split_name, index, split, gold, scorer, retrievers)


def _report(cfg, s: _Study, figures: dict) -> None:
    """``robustness.md``, metrics.json and the recall plots written; the tables printed."""
    rc = cfg.robustness
    out = output_dir(cfg)
    k = run_top_k(cfg)
    tables = report_tables(figures, k)
    title = f"{cfg.data.name} [{s.split_name}], {len(s.split)} questions, seed {int(rc.seed)}" + (
        ", gold protected" if rc.protect_gold else ""
    )
    with atomic_write(out / "robustness.md", "w") as f:
        f.write(f"# Robustness: {title}\n\n{tables}\n")
    save_metrics(cfg, s.index.key, metrics_rows(figures, k), figures)
    pngs = [plot(figures, out / f"robustness_{m}.png", m, k, title) for m in ("answer_recall", "sp_recall")]
    print(tables)
    print(f"\nwrote {out / 'robustness.md'}, {out / 'metrics.json'}, " + ", ".join(str(p) for p in pngs))


def metrics_rows(figures: dict, k: int) -> list[dict]:
    """The tail's rows: one per retriever x perturbation x level, recall at ``k`` (or the largest
    evaluated K below it) over all questions and over those whose gold evidence was touched / not."""
    ks = sorted(int(x) for x in figures["ks"])
    at = max([x for x in ks if x <= k] or ks[:1])
    rows = []
    for r in figures["results"]:
        values, bounds = {}, {}
        for m in ("answer_recall", "sp_recall"):
            for group, per_k in r[m].items():
                name = m if group == "all" else f"{m}_{group}"
                values[name] = per_k.get(str(at))
                if (per_k.get("intervals") or {}).get(str(at)) is not None:
                    bounds[name] = per_k["intervals"][str(at)]
        row = metrics_row(r["retriever"], figures.get("split"), at, values, perturbation=r["method"], level=r["level"])
        rows.append({**row, INTERVALS: bounds})
    return rows
