"""Runner of the SubgraphRAG experiments: ``python train.py +experiment=subgraphrag_*``.

index -> embeddings -> shortest-path supervision -> train (early stopping on validation
triple recall@K) -> reload the best checkpoint -> score the evaluation split with the
precomputed-projection path -> write the top-K results (project JSONL format) and the
recall table at ``eval_ks`` (answer / shortest-path / labelled recall, overall and by hop
count) next to the cosine baseline scored in the same run. Everything lands in the run
folder: ``checkpoints/{best-*,last}.ckpt``, ``results_<split>.jsonl``, ``metrics.json`` (:mod:`gsr_train.eval.tail`).

Settings come from ``cfg.model`` (architecture, plus its training recipe under
``model.train``) and ``cfg.subgraphrag`` (splits, K, threads, resume / eval-only).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from gsr_train.config import defaults_of
from gsr_train.data.errors import PreflightError
from gsr_train.eval.labels import load_labelled_triples
from gsr_train.eval.retrieval import comparison_table, retrieval_metrics
from gsr_train.eval.tail import at_compare_ks, metrics_row, results_file, retrieval_row
from gsr_train.models.subgraphrag.module import SubgraphRAGModule
from gsr_train.models.subgraphrag.options import SubgraphRAGTrain
from gsr_train.models.subgraphrag.perf import keep_freed_memory
from gsr_train.models.subgraphrag.scorer import ScorerConfig
from gsr_train.options.recipes import SubgraphRAGRun
from gsr_train.retrievers.cosine import cosine_scores
from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever, check_compatible
from gsr_train.runs.edge_training import EdgeRecipe, edge_data, fit_edge_scorer, model_meta
from gsr_train.runs.run_data import (
    label_path,
    load_kg_index,
    one_setting,
    output_dir,
    preflight,
    require_family,
    save_metrics,
)
from gsr_train.runtime.device import run_device
from gsr_train.runtime.training import log_final_metrics

log = logging.getLogger(__name__)

DEFAULTS = defaults_of(SubgraphRAGRun)  # the runner's options a config leaves out
TRAIN_DEFAULTS: dict[str, Any] = defaults_of(SubgraphRAGTrain)
METRICS = ("answer_recall", "sp_recall", "labelled_recall")


def _container(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if node is not None and OmegaConf.is_config(node) else node


def settings(cfg: DictConfig) -> tuple[dict, dict, dict]:
    """``(run settings, model options, training recipe)`` with defaults filled in."""
    given = _container(cfg.get("subgraphrag")) or {}
    if given.get("ckpt_path"):
        raise PreflightError(
            "subgraphrag.ckpt_path is gone: resume a run in its own folder with "
            "hydra.run.dir=<run folder> resume=auto (the best checkpoint then covers the whole run)"
        )
    run = {**DEFAULTS, **{k: v for k, v in given.items() if k != "ckpt_path"}}
    model = dict(_container(cfg.get("model")) or {})
    train = {**TRAIN_DEFAULTS, **(model.pop("train", None) or {})}
    train["optim"] = {**TRAIN_DEFAULTS["optim"], **(train.get("optim") or {})}
    train["loss"] = {**TRAIN_DEFAULTS["loss"], **(train.get("loss") or {})}
    return run, model, train


def hop_table(reports: Mapping[str, Any], ks: Sequence[int], metrics: Sequence[str] = METRICS, digits: int = 3) -> str:
    """Markdown: one row per (hop group, model), columns metric@K (groups with questions only)."""
    groups: list[str] = []
    for rep in reports.values():
        groups += [g for g in rep.by_hops if g not in groups]
    metrics = [m for m in metrics if any(m in r.overall for r in reports.values())]
    headers = ["hops", "questions", "model"] + [f"{m}@{k}" for m in metrics for k in ks]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(headers) - 3)) + "|"]
    for g in groups:
        for name, rep in reports.items():
            gm = rep.by_hops.get(g)
            if gm is None:
                continue
            cells = []
            for m in metrics:
                for k in ks:
                    v = gm.overall.get(m, {}).get(k)
                    cells.append("-" if v is None else f"{v:.{digits}f}")
            lines.append("| " + " | ".join([g, str(gm.questions), name] + cells) + " |")
    return "\n".join(lines)


def wins(model: Any, baseline: Any, ks: Sequence[int], metrics: Sequence[str] = METRICS) -> dict[str, dict[int, bool]]:
    """Per metric and K: does ``model`` beat ``baseline`` (strictly)?"""
    out: dict[str, dict[int, bool]] = {}
    for m in metrics:
        if m in model.overall and m in baseline.overall:
            out[m] = {k: (model.overall[m][k] or 0.0) > (baseline.overall[m][k] or 0.0) for k in ks}
    return out


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
    """Every option and input the run needs, before any work."""
    t_start = time.perf_counter()
    run_cfg, model_opts, train = settings(cfg)
    require_family(cfg, ["subgraphrag"], "subgraphrag")
    one_setting(cfg, "model.train.epochs")
    try:
        ScorerConfig.from_options(model_opts, 1)  # unknown or invalid model options: before any work
    except ValueError as e:
        raise PreflightError(f"model={model_opts.get('name')}: {e}") from None
    keep_freed_memory()
    if run_cfg["threads"]:
        torch.set_num_threads(int(run_cfg["threads"]))
    preflight(
        cfg,
        splits=[run_cfg["train_split"], run_cfg["val_split"], run_cfg["eval_split"]],
        label_splits=[run_cfg["eval_split"]],
        checkpoints={"subgraphrag.eval_only": run_cfg["eval_only"]},
        encoder=cfg.encoder,
    )
    return _Run(cfg, run_cfg, model_opts, train, t_start)


def _prepare(r: _Run) -> None:
    """Index, embeddings and shortest-path supervision of the splits the run reads, checked."""
    cfg, run_cfg = r.cfg, r.run_cfg
    t0 = time.perf_counter()
    r.index = load_kg_index(cfg, evaluate=[run_cfg["eval_split"]])
    train_split = None if run_cfg["eval_only"] else run_cfg["train_split"]
    r.emb, r.sup = edge_data(
        cfg, r.index, train_split, run_cfg["val_split"], run_cfg["eval_split"], "subgraphrag.val_split"
    )
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
    trained = fit_edge_scorer(cfg, module, r.index, r.emb, r.sup, recipe)
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
        k=int(r.cfg.top_k),
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
    metrics = [m for m in METRICS if m in reports[name].overall]
    title = f"{name} vs cosine on {cfg.data.name} [{split_name}]"
    table = comparison_table(reports, ks=ks, metrics=metrics, title=title, digits=4)
    hops = hop_table(reports, ks)
    print(table)
    print()
    print(f"### by hop count ({cfg.data.name} [{split_name}])\n")
    print(hops)
    r.timings["total_s"] = time.perf_counter() - r.t_start
    top_k = int(r.cfg.top_k)
    at_k_report = reports[name] if top_k in ks else report(scores, [top_k])
    at_k = {"k": top_k, **{m: at_k_report.overall[m][top_k] for m in METRICS if m in at_k_report.overall}}
    figures = {
        "experiment": cfg.experiment_name,
        "at_k": at_k,
        "data": cfg.data.name,
        "data_fingerprint": r.index.key,
        "split": split_name,
        "model": {"name": name, "scorer": r.scorer_cfg.to_dict(), "train": r.train},
        "encoder": r.emb.encoder_name,
        "questions": len(graphs),
        "triples": int(graphs.edge_rel.numel()),
        "ks": ks,
        "metrics": {n: rep.to_dict() for n, rep in reports.items()},
        "beats_cosine": wins(reports[name], reports["cosine"], ks) if "cosine" in reports else None,
        "labels": label_stats,
        "training": train_info,
        "results_path": str(results_path),
        "checkpoint": best_path,
        "timings": {k: round(v, 3) for k, v in r.timings.items()},
        "tables": {"overall": table, "by_hops": hops},
    }
    _write_rows(r, name, reports, cos_scores, report, at_k, best_path, results_path, figures, trainer)
    log.info("total %.1fs", r.timings["total_s"])
    return figures


def _write_rows(r: _Run, name, reports, cos_scores, report, at_k, best_path, results_path, figures, trainer) -> None:
    """metrics.json's rows (the model, and cosine at the same K) and the tracker's final figures."""
    split_name, top_k, ks = r.run_cfg["eval_split"], at_k["k"], figures["ks"]
    at_top_k = {m: v for m, v in at_k.items() if m != "k"}
    compared = {**at_top_k, **at_compare_ks(reports[name], top_k)}
    rows = [metrics_row(name, split_name, top_k, compared, best_path, results_path)]
    if cos_scores is not None:  # the baseline at the same K
        cos_at = reports["cosine"] if top_k in ks else report(cos_scores, [top_k])
        rows.append(retrieval_row("cosine", cos_at, split_name, top_k))
        rows[-1]["metrics"].update(at_compare_ks(reports["cosine"], top_k))
    save_metrics(r.cfg, r.index.key, rows, figures)
    overall = reports[name].overall
    log_final_metrics(
        trainer,
        {f"test/{m}@{top_k}": v for m, v in at_top_k.items()}
        | {f"test/{m}@{k}": overall[m][k] for m in METRICS if m in overall for k in ks},
    )
