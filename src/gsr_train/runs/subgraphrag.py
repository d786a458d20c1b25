"""Runner of the SubgraphRAG experiments: ``python train.py +experiment=subgraphrag_*``.

index -> embeddings -> shortest-path supervision -> train (early stopping on validation
triple recall@K) -> reload the best checkpoint -> score the evaluation split with the
precomputed-projection path -> write the top-K results (project JSONL format) and the
recall table at ``eval_ks`` (answer / shortest-path / labelled recall, overall and by hop
count) next to the cosine baseline scored in the same run. Everything lands in the run
folder: ``checkpoints/{best-*,last}.ckpt``, ``results_<split>.jsonl``, ``metrics.json`` (`gsr_train.eval.tail`).

Settings come from ``cfg.model`` (architecture, plus its training recipe under
``model.train``) and ``cfg.subgraphrag`` (splits, K, threads, resume / eval-only).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from omegaconf import DictConfig

from gsr_train.eval.comparison import METRICS, at_k, comparison_tables, wins
from gsr_train.eval.labels import load_labelled_triples
from gsr_train.eval.retrieval import retrieval_metrics
from gsr_train.eval.tail import add_intervals, at_compare_ks, metrics_row, results_file, retrieval_row
from gsr_train.models.subgraphrag.module import SubgraphRAGModule
from gsr_train.models.subgraphrag.perf import keep_freed_memory
from gsr_train.models.subgraphrag.scorer import ScorerConfig
from gsr_train.options.preflight import check_subgraphrag
from gsr_train.retrievers.cosine import cosine_scores
from gsr_train.retrievers.edge_training import EdgeRecipe, EdgeSplits, fit_edge_scorer, model_meta
from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever, check_compatible
from gsr_train.runs.train_retriever import run_edge_data
from gsr_train.runtime.device import run_device
from gsr_train.runtime.run_data import label_path, load_kg_index, output_dir, run_top_k, save_metrics
from gsr_train.runtime.training import log_final_metrics, run_fitting

log = logging.getLogger(__name__)


@dataclass
class _Run:
    """What the stages of one SubgraphRAG run share."""

    cfg: DictConfig
    run_cfg: dict
    model_opts: dict
    train: dict
    t_start: float
    timings: dict = field(default_factory=dict)
    index: Any = None
    emb: Any = None
    sup: dict = field(default_factory=dict)
    scorer_cfg: Any = None

    @property
    def out(self):
        return output_dir(self.cfg)


def run(cfg: DictConfig) -> dict:
    """Check the options, prepare the data, train (unless ``subgraphrag.eval_only``), evaluate."""
    r = _check_options(cfg)
    _prepare(r)
    train_info: dict[str, Any] = {}
    trainer: Any = None
    best_path: str | None = str(r.run_cfg["eval_only"]) if r.run_cfg["eval_only"] else None
    if best_path is None:
        best_path, train_info, trainer = _train(r)
        if best_path is None:  # DDP (subprocess launch): rank 0 alone evaluates and writes
            return {}
    return _evaluate(r, best_path, train_info, trainer)


def _check_options(cfg: DictConfig) -> _Run:
    """Every option and input the run needs, before any work (`check_subgraphrag`)."""
    t_start = time.perf_counter()
    run_cfg, model_opts, train = check_subgraphrag(cfg)
    keep_freed_memory()
    if run_cfg["threads"]:
        torch.set_num_threads(int(run_cfg["threads"]))
    return _Run(cfg, run_cfg, model_opts, train, t_start)


def _prepare(r: _Run) -> None:
    """Index, embeddings and shortest-path supervision of the splits the run reads, checked."""
    cfg, run_cfg = r.cfg, r.run_cfg
    t0 = time.perf_counter()
    r.index = load_kg_index(cfg, evaluate=[run_cfg["eval_split"]])
    train_split = None if run_cfg["eval_only"] else run_cfg["train_split"]
    splits = EdgeSplits(train_split, run_cfg["val_split"], run_cfg["eval_split"], "subgraphrag.val_split")
    r.emb, r.sup = run_edge_data(cfg, r.index, splits)
    r.timings["prepare_s"] = time.perf_counter() - t0
    r.scorer_cfg = ScorerConfig.from_options(r.model_opts, r.emb.dim)
    log.info("scorer: %s", r.scorer_cfg)


def _train(r: _Run) -> tuple[str | None, dict, Any]:
    """Fit; the checkpoint to evaluate (None on DDP ranks > 0), what training did, the trainer."""
    cfg, run_cfg, train = r.cfg, r.run_cfg, r.train
    module = SubgraphRAGModule(
        r.model_opts,
        r.emb.dim,
        optim=train["optim"],
        loss=train["loss"],
        val_k=int(train["val_k"]),
        seed=int(cfg.seed),
        meta=model_meta(r.index, r.emb, str(cfg.data.name)),
    )
    recipe = EdgeRecipe(
        train_split=run_cfg["train_split"],
        val_split=run_cfg["val_split"],
        graphs_per_batch=int(train["graphs_per_batch"]),
        batch_option="model.train.graphs_per_batch",
        eval_graphs_per_batch=int(run_cfg["eval_graphs_per_batch"]),
        epochs=int(train["epochs"]),
        patience=train.get("patience"),
        val_k=int(train["val_k"]),
    )
    trained = fit_edge_scorer(run_fitting(cfg), module, r.index, r.emb, r.sup, recipe)
    r.timings["train_s"] = trained.seconds
    return trained.best_path, trained.info, trained.trainer


def _retrieve(r: _Run, best_path: str):
    """The trained scorer's scores of the evaluation split, its top-K written to the results file."""
    run_cfg, split_name = r.run_cfg, r.run_cfg["eval_split"]
    device = run_cfg["device"] or run_device(r.cfg)  # serving follows the trainer unless set
    retriever = SubgraphRAGRetriever.from_checkpoint(
        best_path, device=device, serving=str(run_cfg["serving"]), workers=run_cfg["serving_workers"]
    )
    check_compatible(retriever.hparams, r.emb)
    results_path = results_file(r.out, split_name)
    t0 = time.perf_counter()
    scores = retriever.retrieve(
        r.index,
        split_name,
        r.emb,
        results_path,
        k=run_top_k(r.cfg),
        graphs_per_batch=int(run_cfg["eval_graphs_per_batch"]),
    )
    r.timings["retrieve_s"] = time.perf_counter() - t0
    r.timings.update({f"retrieve_{k}": v for k, v in retriever.timings.items()})
    return scores, results_path


def _measure(r: _Run, ks: Sequence[int]):
    """``report(scores, ks)``: the split's recall with its supervision and labels; the label figures."""
    split_name = r.run_cfg["eval_split"]
    graphs, sup = r.index[split_name], r.sup[split_name]
    labelled = labelled_questions = label_stats = None
    lpath = label_path(r.cfg, split_name)
    if lpath:
        labelled, labelled_questions, label_stats = load_labelled_triples(lpath, r.index, split_name)

    def report(s: torch.Tensor, at: Sequence[int] = ks):
        return retrieval_metrics(
            graphs, s, list(at), sup.triple_label, labelled, labelled_questions, sup.hops, device=run_device(r.cfg)
        )

    return report, label_stats


def _evaluate(r: _Run, best_path: str, train_info: dict, trainer: Any) -> dict:
    """Score the evaluation split, compare with cosine, print the tables, write metrics.json."""
    cfg, split_name = r.cfg, r.run_cfg["eval_split"]
    scores, results_path = _retrieve(r, best_path)
    graphs, ks = r.index[split_name], [int(k) for k in cfg.eval_ks]
    report, label_stats = _measure(r, ks)
    name = str(r.model_opts.get("name") or "subgraphrag")
    reports = {name: report(scores)}
    cos_scores = None
    if r.run_cfg["compare_cosine"]:
        cos_scores = cosine_scores(graphs, r.emb.question[split_name], r.emb)
        reports["cosine"] = report(cos_scores)
    table, hops = comparison_tables(reports, ks, name, f"{name} vs cosine on {cfg.data.name} [{split_name}]")
    print(f"### by hop count ({cfg.data.name} [{split_name}])\n\n{hops}")  # the main table: the closing summary
    r.timings["total_s"] = time.perf_counter() - r.t_start
    top_k = run_top_k(r.cfg)
    at_report = reports[name] if top_k in ks else report(scores, [top_k])
    at_top_k = at_k(at_report, top_k)
    figures = _figures(r, name, reports, ks, at_top_k, (label_stats, train_info, str(results_path), best_path))
    figures["tables"] = {"overall": table, "by_hops": hops}
    at_top = (at_top_k, at_report)
    _write_rows(r, name, reports, cos_scores, report, at_top, best_path, results_path, figures, trainer)
    log.info("total %.1fs", r.timings["total_s"])
    return figures


def _figures(r: _Run, name: str, reports: dict, ks: list[int], at_top_k: dict, more: tuple) -> dict:
    """metrics.json's details of the run (its tables added by the caller); ``more``: the label
    statistics, what training did, the results file and the checkpoint scored."""
    graphs, (labels, training, results, best) = r.index[r.run_cfg["eval_split"]], more
    return {
        "experiment": r.cfg.experiment_name,
        "at_k": at_top_k,
        "data": r.cfg.data.name,
        "data_fingerprint": r.index.key,
        "split": r.run_cfg["eval_split"],
        "model": {"name": name, "scorer": r.scorer_cfg.to_dict(), "train": r.train},
        "encoder": r.emb.encoder_name,
        "questions": len(graphs),
        "triples": int(graphs.edge_rel.numel()),
        "ks": ks,
        "metrics": {n: rep.to_dict() for n, rep in reports.items()},
        "beats_cosine": wins(reports[name], reports["cosine"], ks) if "cosine" in reports else None,
        "labels": labels,
        "training": training,
        "results_path": results,
        "checkpoint": best,
        "timings": {k: round(v, 3) for k, v in r.timings.items()},
    }


def _write_rows(r: _Run, name, reports, cos_scores, report, at_top, best_path, results_path, figures, trainer) -> None:
    """metrics.json's rows (the model, and cosine at the same K, with their intervals) and the tracker's
    final figures; ``at_top``: the model's figures at ``top_k`` and the report they come from."""
    figures_at, at_report = at_top
    split_name, top_k, ks = r.run_cfg["eval_split"], figures_at["k"], figures["ks"]
    at_top_k = {m: v for m, v in figures_at.items() if m != "k"}
    compared = {**at_top_k, **at_compare_ks(reports[name], top_k)}
    values = at_report.question_values(top_k)
    rows = [metrics_row(name, split_name, top_k, compared, best_path, results_path, values)]
    add_intervals(rows[0], reports[name].question_values(top_k))  # and at the Ks compared
    if cos_scores is not None:  # the baseline at the same K
        cos_at = reports["cosine"] if top_k in ks else report(cos_scores, [top_k])
        rows.append(retrieval_row("cosine", cos_at, split_name, top_k))
        rows[-1]["metrics"].update(at_compare_ks(reports["cosine"], top_k))
        add_intervals(rows[-1], reports["cosine"].question_values(top_k))
    save_metrics(r.cfg, r.index.key, rows, figures)
    overall = reports[name].overall
    log_final_metrics(
        trainer,
        {f"test/{m}@{top_k}": v for m, v in at_top_k.items()}
        | {f"test/{m}@{k}": overall[m][k] for m in METRICS if m in overall for k in ks},
    )
