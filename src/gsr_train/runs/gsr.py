"""GSR runner: data -> relation vocabulary -> model -> Lightning training -> chain retrieval -> metrics.

``python train.py +experiment=gsr_quickstart`` (embedded data, gsr_tiny, CPU),
``+experiment=gsr_webqsp_paths`` (webqsp_paths chains, webqsp_mini graphs, gsr_minilm) and
``+experiment=gsr_base`` (RoG-WebQSP, T5-base, paper settings). This module only composes the parts:

* the data (`gsr_train.datamodules.gsr_prepare`: questions, graphs, holdout, walks, relation
  vocabulary, in either layout: RoG datasets, or chain-supervision files with the graphs of a RoG
  dataset sharing the ids) and the training items (`gsr_train.datamodules.gsr_datamodule`);
* the model (`gsr_train.models.gsr.modeling`) and its LightningModule
  (`gsr_train.models.gsr.module`), trained by the run's Trainer
  (`gsr_train.runtime.training.make_trainer`: loggers, ``last.ckpt``, DDP, resume);
* decoding and the chain metrics (`gsr_train.retrievers.gsr.retrieve_and_evaluate`).

The same parts serve ``+experiment=retrieve retriever=gsr`` (`run_retriever`): GSR trained and
scored on the one retriever path, ending as every retriever run does
(`gsr_train.runs.retrieval_report.report_retrieval`).

Every run writes into its Hydra folder: ``checkpoints/*.ckpt`` (best on ``gsr.monitor``; with
``gsr.patience`` training stops after that many validations without a better one),
``val_curve.json`` (the learning curve: validation match@1 / @n with intervals per epoch),
``model/`` (``save_pretrained`` folder with tokenizer and relation list), ``results_<split>
[_constrained].jsonl`` (project results format) and ``metrics.json`` (all figures, the
data summary and wall times).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from omegaconf import DictConfig

from gsr_train.config import plain
from gsr_train.data.errors import PreflightError
from gsr_train.datamodules import gsr_prepare
from gsr_train.datamodules.gsr_chains import chain_relations
from gsr_train.datamodules.gsr_datamodule import build_datamodule
from gsr_train.datamodules.gsr_prepare import GSRData, GSRDataError, GSRSource
from gsr_train.eval.chains import chain_figures, match_table
from gsr_train.eval.intervals import QuestionValues
from gsr_train.eval.tail import metrics_row, results_file
from gsr_train.io import write_json
from gsr_train.kg.index import source_fingerprint
from gsr_train.models.gsr.modeling import build_gsr_model, load_gsr
from gsr_train.models.gsr.module import GSRModule, best_checkpoint, early_stopping
from gsr_train.options.check import built
from gsr_train.options.gsr_retrieve import retriever_run_config
from gsr_train.options.preflight import check_gsr
from gsr_train.options.recipes import GSRModelMiniLM, GSRModelT5, GSRRun, model_options
from gsr_train.retrievers.gsr import edge_scores, retrieve_and_evaluate, write_gsr_results
from gsr_train.retrievers.interface import ROW_FIELDS
from gsr_train.runs.retrieval_report import report_retrieval
from gsr_train.runtime.run_data import (
    RunPlace,
    cache_dir,
    load_kg_index,
    resolve_data_dir,
    run_place,
    run_top_k,
    save_metrics,
)
from gsr_train.runtime.training import Fitting, fit_state, is_rank_zero, log_final_metrics, run_fitting

log = logging.getLogger(__name__)

GSRModel = GSRModelT5 | GSRModelMiniLM  # the model section of a GSR run, by its family


@contextmanager
def _preflight_errors() -> Iterator[None]:
    """The data preparation's mistakes (`GSRDataError`) reported as the runner's
    `PreflightError`, message unchanged."""
    try:
        yield
    except GSRDataError as e:
        raise PreflightError(str(e)) from e


def gsr_recipe(cfg: DictConfig) -> GSRRun:
    """The run's ``gsr`` section as its recipe: what the data steps read (defaults where it is silent)."""
    return built(GSRRun, cfg.gsr)


def gsr_model(cfg: DictConfig) -> GSRModel:
    """The run's ``model`` section as its family's dataclass (what the training stage reads)."""
    return built(model_options(cfg.model), cfg.model)


def gsr_source(cfg: DictConfig) -> GSRSource:
    """The dataset of the run, as its data file names it, and the run's seed."""
    d = cfg.data
    return GSRSource(
        str(d.name),
        str(d.dir),
        tuple(str(s) for s in d.splits),
        int(cfg.seed),
        str(d.graphs) if d.get("graphs") else None,
        tuple(str(s) for s in d.graph_splits) if d.get("graph_splits") else None,
        str(d.get("questions_without_graph") or "error"),
    )


def prepare_paths_data(cfg: DictConfig, g: GSRRun) -> GSRData:
    """Chain-supervision rows (webqsp_paths) + graphs of a RoG dataset sharing the ids
    (`gsr_prepare.prepare_paths_data`), the graphs opened as every runner opens its data."""

    def load_graphs(source: Any, splits: tuple[str, ...]) -> Any:
        return load_kg_index(cfg, source=source, splits=splits)

    with _preflight_errors():
        return gsr_prepare.prepare_paths_data(gsr_source(cfg), g, load_graphs, g.walks)


def prepare_rog_data(cfg: DictConfig, g: GSRRun, index: Any) -> GSRData:
    """A RoG-format dataset (`gsr_prepare.prepare_rog_data`) from the run's KG index."""
    with _preflight_errors():
        return gsr_prepare.prepare_rog_data(gsr_source(cfg), g, index, cache_dir(cfg), g.walks)


def relation_vocab(g: GSRRun, data: GSRData) -> list[str]:
    """The model's relations by ``gsr.relations.source`` (`gsr_prepare.relation_vocab`)."""
    with _preflight_errors():
        return gsr_prepare.relation_vocab(asdict(g.relations), data)


def train_gsr(fit: Fitting, g: GSRRun, model: GSRModel, data: GSRData, gsr):
    """Fit with the run's Trainer; returns (best checkpoint path or None, training seconds, fit
    figures with the trainer)."""
    dm = build_datamodule(g, fit.seed, data, gsr, g.walks, fit.batch(model.batch_size, "model.batch_size"))
    module = _module(g, model, gsr)
    has_val = bool(dm.validation)
    ckpt = best_checkpoint(fit.out / "checkpoints", g.monitor, has_val)
    stop = [early_stopping(g.monitor, g.patience)] if has_val and g.patience else []
    trainer = fit.trainer(
        callbacks=[ckpt, *stop],
        reload_dataloaders_every_n_epochs=1,
        **({} if has_val else {"limit_val_batches": 0}),
    )
    epochs = int(trainer.max_epochs)  # trainer.max_epochs (model.epochs), as the Trainer was built
    module.total_steps = dm.total_steps(epochs, int(trainer.accumulate_grad_batches), int(trainer.world_size))
    log.info("GSR training: %s", data.summary)
    t0 = time.perf_counter()
    with _deterministic_fill(g.deterministic_fill):
        trainer.fit(module, datamodule=dm.as_lightning(), ckpt_path=fit.resume)
    seconds = time.perf_counter() - t0
    state = fit_state(trainer, ckpt)
    if module.curve and is_rank_zero():
        write_json(fit.out / "val_curve.json", {"monitor": g.monitor, "epochs": module.curve})
    last = fit.out / "checkpoints" / "last.ckpt"
    best = state["best_path"] or ckpt.last_model_path or (str(last) if last.exists() else None)
    figures = {k: state[k] for k in ("best_score", "epochs_run")}
    figures["stopped_early"] = bool(stop and stop[0].stopped_epoch > 0)
    figures.update(total_steps=module.total_steps, global_step=state["global_step"], devices=int(trainer.world_size))
    return best, seconds, {**figures, "trainer": trainer}


@contextmanager
def _deterministic_fill(fill: bool) -> Iterator[None]:
    """torch's ``fill_uninitialized_memory`` for one block: under ``trainer.deterministic`` it fills every
    new tensor with NaN (a guard against reading uninitialised memory: the same results without it)."""
    before = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    torch.utils.deterministic.fill_uninitialized_memory = fill  # type: ignore[attr-defined]
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = before  # type: ignore[attr-defined]


def _module(g: GSRRun, model: GSRModel, gsr) -> GSRModule:
    return GSRModule(
        gsr,
        asdict(model.optim),
        asdict(g.val_decode),
        None,
        g.loss_weighting,
        g.length_groups or 0,
        g.pack,
        g.fused_adamw,
    )


def evaluate_gsr(r: _GSRRun, constrained: bool, write: bool = True) -> tuple[dict, QuestionValues | None]:
    """One decoding mode scored (`retrieve_and_evaluate`) and, when ``write``, its results file
    (``results_<split>[_constrained].jsonl.gz``); the report as a dict, and its per-question chain match."""
    g, data = r.recipe, r.data
    decode = replace(g.decode, top_n=r.top_k, constrained=constrained)
    results, rows, report = retrieve_and_evaluate(r.gsr, data, decode, g.eval_split, list(g.match_ns), g.max_paths)
    if write and data.graph_index is not None:
        path = results_file(r.place.out, g.eval_split, "_constrained" if constrained else "")
        write_gsr_results(path, data.graph_index, "eval", results, rows)
        report.extra["results_file"] = path.name
    log.info("\n%s", report.table())
    return report.to_dict(), report.questions


def _fingerprint(cfg: DictConfig, split: str) -> str | None:
    """The evaluated split's content digest (None when the layout has no such file)."""
    try:
        return source_fingerprint(resolve_data_dir(cfg), split)
    except (FileNotFoundError, FileExistsError, ValueError):
        return None


def _metrics_row(r: _GSRRun, mode: str, report: Mapping[str, Any], per_question: QuestionValues | None) -> dict:
    """The tail's row of one decoding mode: chain match (with its intervals) and answer coverage at ``top_k``."""
    values, labels = chain_figures(report)
    results, g = report.get("results_file"), r.recipe
    return metrics_row(
        "gsr",
        g.eval_split,
        r.top_k,
        values,
        r.best,
        r.place.out / results if results else None,
        per_question,
        model=r.model.name,
        mode=mode,
        variant=g.variant,
        schedule=g.schedule,
        **labels,
    )


@dataclass
class _GSRRun:
    """What the stages of one GSR run share: the config stays for the data's opening, the Trainer and
    metrics.json (`gsr_train.runtime`); the stages read the recipe, the model section and the place."""

    cfg: DictConfig
    recipe: GSRRun  # the gsr section, built once (gsr_recipe)
    model: GSRModel  # the model section (its family's dataclass), built once
    top_k: int
    place: RunPlace
    data: GSRData
    prep_seconds: float
    figures: dict[str, Any]
    gsr: Any = None
    best: str | None = None
    train_seconds: float = 0.0
    fit_info: dict[str, Any] = field(default_factory=dict)
    trainer: Any = None
    index: Any = None  # the KG index of a RoG-format dataset (None: chain files)


def run(cfg: DictConfig) -> float | None:
    """Check the options, prepare the data, train (or load ``gsr.eval_only``), evaluate in every
    ``gsr.eval_modes`` mode and report; match@``top_k`` of the first mode."""
    check_gsr(cfg)
    r = prepare(cfg)
    if not train_or_load(r):
        return None  # DDP (subprocess launch): rank 0 alone evaluates and writes
    return _evaluate(r)


def prepare(cfg: DictConfig) -> _GSRRun:
    """The run's data in either layout (smoke runs: its first ``gsr.max_eval_questions`` evaluation
    questions) and the figures that describe the run."""
    g, model = gsr_recipe(cfg), gsr_model(cfg)
    torch.set_num_threads(g.threads or torch.get_num_threads())
    t0 = time.perf_counter()
    index = None if cfg.data.get("format") == "paths" else load_kg_index(cfg, evaluate=[g.eval_split])
    data = prepare_paths_data(cfg, g) if index is None else prepare_rog_data(cfg, g, index)
    if g.max_eval_questions:  # smoke runs: evaluate on the first questions only
        data.first_questions(min(g.max_eval_questions, len(data.evaluation)))  # a split can be smaller
    figures: dict[str, Any] = {
        "experiment": cfg.get("experiment_name"),
        "model": model.name,
        "variant": g.variant,
        "schedule": g.schedule,
        "relation_head": model.relation_head,
        "relation_source": g.relations.source,
        "relation_residual": model.relation_residual,
        "relation_residual_dropout": float(model.relation_residual_dropout),
        "index_ratio": float(g.index_ratio),
        "walks": g.walks.count,
        "holdout": float(g.holdout.fraction or 0.0),
    }
    place = run_place(cfg)
    return _GSRRun(cfg, g, model, run_top_k(cfg), place, data, time.perf_counter() - t0, figures, index=index)


def train_or_load(r: _GSRRun) -> bool:
    """The model: ``gsr.eval_only``'s, or built on the relation vocabulary, trained, reloaded from its
    best checkpoint and saved into ``model/``; False on DDP ranks > 0 (they stop after training)."""
    g = r.recipe
    if g.eval_only:
        r.gsr, r.best = load_gsr(g.eval_only), g.eval_only
        return True
    # the model file as written (build_gsr_model fills what it leaves out)
    gsr = build_gsr_model(plain(r.cfg.model), relation_vocab(g, r.data))
    gsr.chain_relations = sorted(chain_relations(r.data.train))  # travels in checkpoints and the saved folder
    r.best, r.train_seconds, r.fit_info = train_gsr(run_fitting(r.cfg), g, r.model, r.data, gsr)
    r.trainer = r.fit_info.pop("trainer")
    if not is_rank_zero():
        return False
    r.gsr = load_gsr(r.best) if r.best else gsr
    r.gsr.save_pretrained(r.place.out / "model")
    return True


def describe(r: _GSRRun) -> None:
    """The model on the run's device (decoding follows the trainer; loaded checkpoints come on the CPU)
    and the figures of what was trained and what it cannot decode."""
    r.gsr = r.gsr.to(r.place.device)
    unknown = r.data.unknown_relations(set(r.gsr.relations.relations))
    if unknown["kg_relations_without_token"]:
        log.info("relations the model has no token for: %s", unknown)
    r.figures.update(
        {
            "unknown_relations": unknown,
            "data": r.data.summary,
            "num_relations": len(r.gsr.relations),
            "checkpoint": r.best,
            "fit": r.fit_info,
            "prep_seconds": r.prep_seconds,
            "train_seconds": r.train_seconds,
            "parameters": sum(p.numel() for p in r.gsr.parameters()),
        }
    )


def _evaluate(r: _GSRRun) -> float | None:
    """Every decoding mode scored, the match table printed, metrics.json written; the first mode's
    match@``top_k``."""
    figures = r.figures
    describe(r)
    modes = list(r.recipe.eval_modes)
    values = {}
    for mode in modes:  # each checked by check_gsr
        figures[mode], values[mode] = evaluate_gsr(r, constrained=(mode == "constrained"))
    figures["tables"] = {"overall": match_table(figures, modes)}  # printed by the run's closing summary
    rows = [_metrics_row(r, mode, figures[mode], values[mode]) for mode in modes]
    save_metrics(r.cfg, _fingerprint(r.cfg, r.recipe.eval_split), rows, figures)
    matches = {mode: figures[mode].get("chain_match", {}) for mode in modes}
    log_final_metrics(r.trainer, {f"test/{mode}/{k}": v for mode in modes for k, v in matches[mode].items()})
    return matches[modes[0]].get(f"match@{r.top_k}") if modes else None


# ---------------------------------------------------------------------- +experiment=retrieve retriever=gsr
def run_retriever(cfg: DictConfig) -> dict[str, Any]:
    """``+experiment=retrieve retriever=gsr``: train GSR as the GSR experiments do (the model group,
    ``retriever.options`` as their ``gsr`` section, the run's Trainer: callbacks, DDP, ``resume=auto``)
    or load ``eval_only`` / ``retriever.options.model``; decode ``split`` and end as every retriever
    run does (`report_retrieval`), its chain figures beside recall."""
    gcfg = retriever_run_config(cfg)
    check_gsr(gcfg, "eval_only" if cfg.get("eval_only") else "retriever.options.model", [str(cfg.split)])
    r = prepare(gcfg)
    if not train_or_load(r):
        return {}  # DDP (subprocess launch): rank 0 alone scores and writes
    return _report_retrieval(r)


def _report_retrieval(r: _GSRRun) -> dict[str, Any]:
    """Decode the split (its triples scored by the best kept chain through them) and write what every
    retriever run writes, plus the chain figures: chain match on the metrics row, the whole chain
    report under the decoding mode's name, the results rows' chains, reasoning paths and beams."""
    g, split = r.recipe, str(r.cfg.split)
    describe(r)
    results, rows, report = retrieve_and_evaluate(r.gsr, r.data, g.decode, split, list(g.match_ns), g.max_paths)
    mode, chains = str(g.eval_modes[0]), report.to_dict()
    print(match_table({mode: chains}, [mode]))
    match = {k: v for k, v in (chains["chain_match"] | chains["end_match"]).items() if k != "questions"}
    fields = {name: [getattr(q, name) for q in results] for name in ("chains", "paths", "beams")}
    extra = {**report.valid, "score_seconds": round(chains["inference_seconds"], 3), ROW_FIELDS: fields}
    figures = {k: v for k, v in r.figures.items() if k not in ("fit", "data")}  # "data": the dataset's name here
    figures.update(data_summary=r.data.summary, training={**r.fit_info, "train_s": round(r.train_seconds, 3)})
    figures.update({"mode": mode, mode: chains})  # as a GSR experiment's: gsr-train gsr-table reads it
    if g.eval_only is None:
        figures["model_folder"] = str(r.place.out / "model")
    scores = edge_scores(r.data.graph_index["eval"], results, rows)
    row = (match, {"mode": mode}, report.questions)  # chain match on the row, with its intervals
    return report_retrieval(r.cfg, r.index, split, "gsr", scores, extra, figures, *row)
