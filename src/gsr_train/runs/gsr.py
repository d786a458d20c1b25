"""GSR runner: data -> relation vocabulary -> model -> Lightning training -> chain retrieval -> metrics.

``python train.py +experiment=gsr_quickstart`` (embedded data, gsr_tiny, CPU),
``+experiment=gsr_webqsp_paths`` (webqsp_paths chains, webqsp_mini graphs, gsr_minilm) and
``+experiment=gsr_base`` (RoG-WebQSP, T5-base, paper settings). Two data layouts:

* RoG datasets (graphs in the rows): chains from the shortest-path supervision
  (:mod:`gsr_train.kg.paths`), graphs for execution from the KG index, ground chains for
  evaluation = the split's raw chains.
* chain-supervision files (``data.format: paths``, e.g. webqsp_paths): chains from the rows,
  graphs from a RoG dataset that shares question ids (``data.graphs``, webqsp_mini), the
  evaluation questions' graphs gathered from whichever of its splits holds them.

The data preparation lives in :mod:`gsr_train.datamodules.gsr_prepare` (questions, graphs, holdout,
walks, relation vocabulary) and :mod:`gsr_train.datamodules.gsr_datamodule` (the training items);
this module opens the data, checks the options, trains, evaluates and reports.

Every run writes into its Hydra folder: ``checkpoints/*.ckpt`` (best on ``gsr.monitor``),
``model/`` (``save_pretrained`` folder with tokenizer and relation list), ``results_<split>
[_constrained].jsonl`` (project results format) and ``metrics.json`` (all figures, the
data summary and wall times).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig, OmegaConf

from gsr_train.data.errors import PreflightError
from gsr_train.datamodules import gsr_prepare
from gsr_train.datamodules.gsr_prepare import GSRData, GSRDataError
from gsr_train.runs.run_data import (
    cache_dir,
    load_kg_index,
    one_setting,
    output_dir,
    preflight,
    require_family,
    resolve_data_dir,
    save_metrics,
)
from gsr_train.runtime.device import run_device
from gsr_train.runtime.training import fit_state, is_rank_zero, log_final_metrics, make_trainer, rank_batch, resume_path

if TYPE_CHECKING:
    from gsr_train.options.recipes import GSRWalks

log = logging.getLogger(__name__)
GSR_FAMILIES = ("t5", "minilm")  # model.family of the GSR models (conf/model/gsr_*.yaml)
EVAL_MODES = ("unconstrained", "constrained")


def _container(node) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


@contextmanager
def _preflight_errors() -> Iterator[None]:
    """The data preparation's mistakes (:class:`GSRDataError`) reported as the runner's
    :class:`PreflightError`, message unchanged."""
    try:
        yield
    except GSRDataError as e:
        raise PreflightError(str(e)) from e


def walk_options(cfg: DictConfig) -> GSRWalks:
    """``gsr.walks`` through its recipe (:class:`~gsr_train.options.recipes.GSRWalks`: one place for defaults)."""
    from gsr_train.options.recipes import GSRWalks

    return GSRWalks(**(_container(cfg.gsr.get("walks")) or {}))


def check_walks(cfg: DictConfig) -> None:
    """``gsr.walks`` mistakes, before any data work."""
    problems = gsr_prepare.walk_problems(walk_options(cfg))
    if problems:
        raise PreflightError("; ".join(problems))


def prepare_paths_data(cfg: DictConfig) -> GSRData:
    """Chain-supervision rows (webqsp_paths) + graphs of a RoG dataset sharing the ids
    (:func:`gsr_prepare.prepare_paths_data`), the graphs opened as every runner opens its data."""

    def load_graphs(source: Any, splits: tuple[str, ...]) -> Any:
        return load_kg_index(cfg, source=source, splits=splits)

    with _preflight_errors():
        return gsr_prepare.prepare_paths_data(cfg, load_graphs, walk_options(cfg))


def prepare_rog_data(cfg: DictConfig) -> GSRData:
    """A RoG-format dataset (:func:`gsr_prepare.prepare_rog_data`) from the run's KG index."""
    index = load_kg_index(cfg, evaluate=[cfg.gsr.eval_split])
    with _preflight_errors():
        return gsr_prepare.prepare_rog_data(cfg, index, cache_dir(cfg), walk_options(cfg))


def relation_vocab(cfg: DictConfig, data: GSRData) -> list[str]:
    """The model's relations by ``gsr.relations.source`` (:func:`gsr_prepare.relation_vocab`)."""
    with _preflight_errors():
        return gsr_prepare.relation_vocab(cfg.gsr.relations, data)


def train_gsr(cfg: DictConfig, data: GSRData, gsr):
    """Fit; returns (best checkpoint path or None, training seconds, fit figures with the trainer)."""
    from gsr_train.datamodules.gsr_datamodule import build_datamodule
    from gsr_train.models.gsr.module import GSRModule

    batch = rank_batch(cfg, int(cfg.model.batch_size), "model.batch_size")
    dm = build_datamodule(cfg, data, gsr, walk_options(cfg), batch)
    max_epochs = int(cfg.trainer.max_epochs)
    accum = int(cfg.trainer.get("accumulate_grad_batches", 1) or 1)
    module = GSRModule(
        gsr,
        optim=_container(cfg.model.optim),
        val_decode=_container(cfg.gsr.val_decode),
        total_steps=None,
        weighting=cfg.gsr.get("loss_weighting", "question"),
    )
    has_val = bool(dm.validation)
    ckpt = _best_checkpoint(cfg, has_val)
    trainer = make_trainer(
        cfg, callbacks=[ckpt], reload_dataloaders_every_n_epochs=1, **({} if has_val else {"limit_val_batches": 0})
    )
    world = int(trainer.world_size)
    total = _total_steps(dm, max_epochs, accum, world)
    module.total_steps = total
    log.info("GSR training: %s", data.summary)
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=dm.as_lightning(), ckpt_path=resume_path(cfg))
    seconds = time.perf_counter() - t0
    state = fit_state(trainer, ckpt)
    last = output_dir(cfg) / "checkpoints" / "last.ckpt"
    best = state["best_path"] or ckpt.last_model_path or (str(last) if last.exists() else None)
    return (
        best,
        seconds,
        {
            "best_score": state["best_score"],
            "epochs_run": state["epochs_run"],
            "total_steps": total,
            "global_step": state["global_step"],
            "devices": world,
            "trainer": trainer,
        },
    )


def _best_checkpoint(cfg: DictConfig, has_val: bool):
    """The checkpoint callback: the best epoch on ``gsr.monitor`` (no validation data: the last one)."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    monitor = cfg.gsr.monitor
    return ModelCheckpoint(
        dirpath=str(output_dir(cfg) / "checkpoints"),
        filename="best-epoch{epoch:02d}",
        auto_insert_metric_name=False,
        save_top_k=1,
        monitor=monitor if has_val else None,
        mode="min" if monitor.endswith("loss") else "max",
        save_last=False,
        enable_version_counter=False,
    )


def _total_steps(dm, max_epochs: int, accum: int, world: int) -> int:
    """Optimiser steps of the whole run on each rank (DDP: every rank holds 1/W of an epoch's items)."""
    from gsr_train.datamodules.triple_datamodule import RankSampler

    return sum(
        math.ceil(
            -(-len(RankSampler(len(dm.epoch_items(e)), shuffle=False, num_replicas=world, rank=0)) // dm.batch_size)
            / accum
        )
        for e in range(max_epochs)
    )


def evaluate_gsr(cfg: DictConfig, data: GSRData, gsr, constrained: bool, write: bool = True) -> dict:
    from gsr_train.datamodules.gsr_data import chain_relations
    from gsr_train.datamodules.relation_holdout import vocabulary_groups
    from gsr_train.models.gsr.decoding import DecodeConfig
    from gsr_train.retrievers.gsr import GSRRetriever, evaluate, write_gsr_results

    decode = DecodeConfig.from_any({**_container(cfg.gsr.decode), "top_n": int(cfg.top_k), "constrained": constrained})
    ev = data.evaluation
    gidx = data.graph_index
    has_graph = data.has_graph or [gidx is not None] * len(ev)
    rows = list(range(len(ev))) if gidx is not None else [-1] * len(ev)
    if getattr(gsr, "open_vocabulary", False) and data.kg_relations:  # every relation of the graphs' KG
        added = gsr.extend_relations(data.kg_relations)
        if added:
            log.info("open-vocabulary GSR: %d relations of the KG added to the output vocabulary by name", added)
    retriever = GSRRetriever(gsr, decode, max_paths=int(cfg.gsr.get("max_paths", 64)))
    t0 = time.perf_counter()
    graphs = gidx["eval"] if gidx is not None else None
    results = retriever.retrieve(
        [q.id for q in ev],
        [q.question for q in ev],
        graphs,
        rows,
        gidx.entities if gidx is not None else [],
        data.kg_relations,
        ground=[q.ground for q in ev] if graphs is not None else None,
    )
    seconds = time.perf_counter() - t0
    answers = [graphs.answers[i] if (graphs is not None and has_graph[i]) else None for i in range(len(ev))]
    seen = getattr(gsr, "chain_relations", None)  # the model's own training chains when it recorded them
    if seen is None and data.train:
        seen = chain_relations(data.train)
    groups = vocabulary_groups([q.ground for q in ev], seen) if seen is not None else None
    report = evaluate(
        results,
        [q.ground for q in ev],
        answers,
        decode.top_n,
        split=cfg.gsr.eval_split,
        ns=list(cfg.gsr.get("match_ns", [1, 3, 5, 10])),
        groups=groups,
    )
    report.extra.update(
        {"decode": vars(decode), "inference_seconds": seconds, "decode_seconds": retriever.decode_seconds}
    )
    if write and gidx is not None:
        name = f"results_{cfg.gsr.eval_split}{'_constrained' if constrained else ''}.jsonl"
        write_gsr_results(output_dir(cfg) / name, gidx, "eval", results, rows)
        report.extra["results_file"] = name
    log.info("\n%s", report.table())
    return report.to_dict()


def unknown_relations(data: GSRData, gsr, examples: int = 10) -> dict:
    """Relations of the evaluation graphs and ground chains the model has no token for: they
    cannot be decoded (constrained decoding skips them), so they are counted, not crashed on."""
    known = set(gsr.relations.relations)
    in_graphs: set[str] = set()
    if data.graph_index is not None:
        graphs = data.graph_index["eval"]
        rel_ids = torch.unique(graphs.edge_rel.long()) if graphs.edge_rel.numel() else torch.zeros(0, dtype=torch.long)
        in_graphs = set(
            data.graph_index.relations.take(rel_ids.numpy())
            if hasattr(data.graph_index.relations, "take")
            else [data.graph_index.relations[int(r)] for r in rel_ids.tolist()]
        )
    missing = sorted(in_graphs - known)
    needing = [
        q.id for q in data.evaluation if q.ground and all(any(r not in known for r in chain) for chain in q.ground)
    ]
    return {
        "kg_relations_without_token": len(missing),
        "kg_relations": len(in_graphs),
        "examples": missing[:examples],
        "eval_questions_needing_unknown": len(needing),
        "eval_question_examples": needing[:examples],
    }


def _fingerprint(cfg: DictConfig) -> str | None:
    """The evaluated split's content digest (None when the layout has no such file)."""
    from gsr_train.kg.index import source_fingerprint

    try:
        return source_fingerprint(resolve_data_dir(cfg), str(cfg.gsr.eval_split))
    except (FileNotFoundError, FileExistsError, ValueError):
        return None


def _metrics_row(cfg: DictConfig, mode: str, report: Mapping[str, Any], checkpoint: str | None) -> dict:
    """The tail's row of one decoding mode: chain match and answer coverage at ``top_k``."""
    from gsr_train.eval.tail import metrics_row

    values = dict(report.get("chain_match") or {})
    n = values.pop("questions", None)  # a count: a label of the row, not a metric
    labels = {}
    for group, match in (report.get("match_by_group") or {}).items():  # seen / unseen relations
        labels[f"{group}_n"] = match.get("questions")
        values.update({f"{group}_{k}": v for k, v in match.items() if k != "questions"})
    values.update({k: v for k, v in (report.get("end_match") or {}).items() if k != "questions"})
    values.update(
        {
            f"cov_{m}": v
            for m, v in (report.get("answer_coverage") or {}).items()
            if isinstance(v, (int, float)) and m != "questions"
        }
    )
    results = report.get("results_file")
    return metrics_row(
        "gsr",
        str(cfg.gsr.eval_split),
        int(cfg.top_k),
        values,
        checkpoint,
        output_dir(cfg) / results if results else None,
        model=str(cfg.model.name),
        mode=mode,
        variant=str(cfg.gsr.variant),
        schedule=str(cfg.gsr.schedule),
        n=n,
        **labels,
    )


@dataclass
class _GSRRun:
    """What the stages of one GSR run share."""

    cfg: DictConfig
    data: GSRData
    prep_seconds: float
    figures: dict[str, Any]
    gsr: Any = None
    best: str | None = None
    train_seconds: float = 0.0
    fit_info: dict[str, Any] = field(default_factory=dict)
    trainer: Any = None


def run(cfg: DictConfig) -> float | None:
    """Check the options, prepare the data, train (or load ``gsr.eval_only``), evaluate in every
    ``gsr.eval_modes`` mode and report; match@``top_k`` of the first mode."""
    _check_options(cfg)
    r = _prepare(cfg)
    if not _train_or_load(r):
        return None  # DDP (subprocess launch): rank 0 alone evaluates and writes
    return _evaluate(r)


def _check_options(cfg: DictConfig) -> None:
    """Every option and input the run needs, before any data work."""
    from gsr_train.models.gsr.modeling import resolve_pretrained

    g = cfg.gsr
    require_family(cfg, GSR_FAMILIES, "gsr")
    one_setting(cfg, "model.epochs")
    for mode in g.get("eval_modes", ["unconstrained"]):
        if mode not in EVAL_MODES:
            raise PreflightError(f"gsr.eval_modes entries must be unconstrained | constrained, got {mode!r}")
    check_walks(cfg)
    share = g.index.get("kg_share")
    if share is not None and (not isinstance(share, (int, float)) or not 0 <= float(share) <= 1):
        raise PreflightError(f"gsr.index.kg_share must be a share in [0, 1] or null, got {share!r}")
    if share is not None and g.schedule == "retrieval":
        raise PreflightError("gsr.index.kg_share weights indexing examples, but gsr.schedule=retrieval has none")
    needed = [g.eval_split] + ([] if g.get("eval_only") else ["train"])
    preflight(
        cfg,
        splits=needed if cfg.data.get("format") != "paths" else [],
        checkpoints={"gsr.eval_only": g.get("eval_only")},
    )
    if cfg.model.get("pretrained") and not g.get("eval_only"):
        resolve_pretrained(cfg.model.pretrained)  # fail before any data work when the hub is unreachable
    torch.set_num_threads(int(g.get("threads") or torch.get_num_threads()))


def _prepare(cfg: DictConfig) -> _GSRRun:
    """The run's data in either layout (smoke runs: its first ``gsr.max_eval_questions`` evaluation
    questions) and the figures that describe the run."""
    g = cfg.gsr
    t0 = time.perf_counter()
    data = prepare_paths_data(cfg) if cfg.data.get("format") == "paths" else prepare_rog_data(cfg)
    if g.get("max_eval_questions"):  # smoke runs: evaluate on the first questions only
        _first_questions(data, min(int(g.max_eval_questions), len(data.evaluation)))  # a split can be smaller
    prep_seconds = time.perf_counter() - t0
    figures: dict[str, Any] = {
        "experiment": cfg.get("experiment_name"),
        "model": cfg.model.name,
        "variant": g.variant,
        "schedule": g.schedule,
        "relation_head": str(cfg.model.get("relation_head", "token")),
        "relation_source": str(g.relations.source),
        "relation_residual": bool(cfg.model.get("relation_residual", True)),
        "relation_residual_dropout": float(cfg.model.get("relation_residual_dropout") or 0.0),
        "index_ratio": float(g.index_ratio),
        "walks": walk_options(cfg).count,
        "holdout": float((g.get("holdout") or {}).get("fraction") or 0.0),
    }
    return _GSRRun(cfg, data, prep_seconds, figures)


def _first_questions(data: GSRData, n: int) -> None:
    """Keep the first ``n`` evaluation questions (and their graphs)."""
    data.evaluation = data.evaluation[:n]
    data.has_graph = data.has_graph[:n]
    if data.graph_index is not None:
        from gsr_train.kg.index import KGIndex

        gi = data.graph_index
        data.graph_index = KGIndex(gi.entities, gi.relations, {"eval": gi["eval"].subset(range(n))}, {})


def _train_or_load(r: _GSRRun) -> bool:
    """The model: ``gsr.eval_only``'s, or built on the relation vocabulary, trained, reloaded from its
    best checkpoint and saved into ``model/``; False on DDP ranks > 0 (they stop after training)."""
    from gsr_train.datamodules.gsr_chains import chain_relations
    from gsr_train.models.gsr.modeling import build_gsr_model, load_gsr

    cfg, g = r.cfg, r.cfg.gsr
    if g.get("eval_only"):
        r.gsr, r.best = load_gsr(g.eval_only), str(g.eval_only)
        return True
    relations = relation_vocab(cfg, r.data)
    gsr = build_gsr_model(_container(cfg.model), relations)
    gsr.chain_relations = sorted(chain_relations(r.data.train))  # travels in checkpoints and the saved folder
    r.best, r.train_seconds, r.fit_info = train_gsr(cfg, r.data, gsr)
    r.trainer = r.fit_info.pop("trainer")
    if not is_rank_zero():
        return False
    r.gsr = load_gsr(r.best) if r.best else gsr
    r.gsr.save_pretrained(output_dir(cfg) / "model")
    return True


def _evaluate(r: _GSRRun) -> float | None:
    """Every decoding mode scored, the match table printed, metrics.json written; the first mode's
    match@``top_k``."""
    cfg, g, figures = r.cfg, r.cfg.gsr, r.figures
    r.gsr = r.gsr.to(run_device(cfg))  # decoding follows the trainer (loaded checkpoints come on the CPU)
    figures["unknown_relations"] = unknown_relations(r.data, r.gsr)
    if figures["unknown_relations"]["kg_relations_without_token"]:
        log.info("relations the model has no token for: %s", figures["unknown_relations"])
    figures.update(
        {
            "data": r.data.summary,
            "num_relations": len(r.gsr.relations),
            "checkpoint": r.best,
            "fit": r.fit_info,
            "prep_seconds": r.prep_seconds,
            "train_seconds": r.train_seconds,
            "parameters": sum(p.numel() for p in r.gsr.parameters()),
        }
    )
    modes = list(g.get("eval_modes", ["unconstrained"]))
    for mode in modes:
        if mode not in EVAL_MODES:
            raise ValueError(f"gsr.eval_modes entries must be unconstrained | constrained, got {mode!r}")
        figures[mode] = evaluate_gsr(cfg, r.data, r.gsr, constrained=(mode == "constrained"))
    figures["tables"] = {"overall": match_table(figures, modes)}
    print(figures["tables"]["overall"])
    save_metrics(cfg, _fingerprint(cfg), [_metrics_row(cfg, mode, figures[mode], r.best) for mode in modes], figures)
    main = figures[modes[0]]["chain_match"] if modes else {}
    log_final_metrics(
        r.trainer, {f"test/{mode}/{k}": v for mode in modes for k, v in figures[mode].get("chain_match", {}).items()}
    )
    return main.get(f"match@{int(cfg.top_k)}")


def match_table(figures: Mapping[str, Any], modes: list[str]) -> str:
    """Chain match per decoding mode: all questions, those a closed vocabulary can match (a ground
    chain of relations seen in training chains) and those it cannot (they need an unseen relation)."""
    head = (
        "| decoding | questions | match@1 | match@3 | seen | seen match@1 | seen match@3 | unseen | "
        "unseen match@1 | unseen match@3 |"
    )
    lines = [head, "|---|" + "---:|" * 9]

    def cell(match: Mapping[str, Any], key: str) -> str:
        v = match.get(key)
        return "-" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))

    for mode in modes:
        r = figures[mode]
        m, groups = r.get("chain_match") or {}, r.get("match_by_group") or {}
        seen, unseen = groups.get("seen") or {}, groups.get("unseen") or {}
        lines.append(
            "| "
            + " | ".join(
                [
                    mode,
                    cell(m, "questions"),
                    cell(m, "match@1"),
                    cell(m, "match@3"),
                    cell(seen, "questions"),
                    cell(seen, "match@1"),
                    cell(seen, "match@3"),
                    cell(unseen, "questions"),
                    cell(unseen, "match@1"),
                    cell(unseen, "match@3"),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------- sweep table
TABLE_COLUMNS = (
    "match@1",
    "match@3",
    "match@10",
    "end_match@1",
    "end_match@3",
    "seen_match@1",
    "seen_match@3",
    "unseen_match@1",
    "unseen_match@3",
    "cov_precision",
    "cov_recall",
    "cov_f1",
    "paper_precision",
    "paper_recall",
    "paper_f1",
    "cov_hits",
    "valid_fraction",
    "valid_fraction@3",
)


def _relation_head(figures: Mapping[str, Any], run: Path) -> str:
    """The run's relation head (from its figures, else from its saved model's spec)."""
    import json

    if figures.get("relation_head"):
        return str(figures["relation_head"])
    spec = run / "model" / "gsr_config.json"
    return str(json.loads(spec.read_text())["spec"].get("relation_head", "token")) if spec.is_file() else "token"


def _run_settings(figures: Mapping[str, Any], run: Path):
    """``setting(key, path, default)``: a run's setting from its figures, else from its composed
    config (runs older than the key), the config read at most once."""
    loaded: list = []

    def setting(key: str, path: str, default):
        if key in figures:
            return figures[key]
        if not loaded:
            cfg_file = run / ".hydra" / "config.yaml"
            loaded.append(OmegaConf.load(cfg_file) if cfg_file.is_file() else None)
        if loaded[0] is None:
            return default
        value = OmegaConf.select(loaded[0], path, default=default)
        return default if value is None else value

    return setting


def collect_metrics(root: str | Path) -> list[dict]:
    """Flat rows from every ``metrics.json`` under ``root`` (a run folder or a multirun folder)."""
    import json

    from gsr_train.eval.chains import ChainReport

    rows = []
    for path in sorted(Path(root).rglob("metrics.json")):
        m = json.loads(path.read_text())
        if "variant" not in m:
            continue
        run = path.parent
        setting = _run_settings(m, run)
        head = _relation_head(m, run)
        residual = setting("relation_residual", "model.relation_residual", True)
        dropout = float(setting("relation_residual_dropout", "model.relation_residual_dropout", 0.0))
        settings = {
            "run": str(run),
            "model": m.get("model"),
            "head": head,
            "residual": ("no" if not residual else f"drop {dropout:g}" if dropout else "yes") if head == "open" else "",
            "relations": setting("relation_source", "gsr.relations.source", "kg"),
            "index_ratio": float(setting("index_ratio", "gsr.index_ratio", 1.0)),
            "walks": int((m.get("data") or {}).get("walks", 0)),
            "holdout": float(setting("holdout", "gsr.holdout.fraction", 0.0)),
        }
        for mode in ("unconstrained", "constrained"):
            if mode not in m:
                continue
            r = m[mode]
            rep = ChainReport(
                r.get("split", ""),
                r["chain_match"],
                r["answer_coverage"],
                r["paper_coverage"],
                r["validity"],
                r.get("match_by_group") or {},
                r.get("end_match") or {},
            )
            # constrained runs before gsr.decode.shortest existed decoded without it
            shortest = bool((r.get("decode") or {}).get("shortest", False)) if mode == "constrained" else None
            rows.append(
                {
                    **settings,
                    "variant": m["variant"],
                    "schedule": m["schedule"],
                    "mode": mode,
                    "shortest": "" if shortest is None else ("yes" if shortest else "no"),
                    "epochs": (m.get("fit") or {}).get("epochs_run"),
                    "train_s": round(m.get("train_seconds", 0.0)),
                    **rep.flat(),
                }
            )
    return rows


def metrics_table(rows: list[dict], columns=TABLE_COLUMNS) -> str:
    """A markdown table: one line per run and decoding mode."""
    head = [
        "model",
        "head",
        "residual",
        "relations",
        "index_ratio",
        "walks",
        "holdout",
        "variant",
        "schedule",
        "mode",
        "shortest",
        "epochs",
        "train_s",
        *columns,
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{r.get(c):.4f}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in head]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``gsr-train gsr-table <run or multirun folder> [--json out.json]``: one GSR table over runs."""
    import argparse

    from gsr_train.io import write_json

    ap = argparse.ArgumentParser(description="GSR results table from run folders")
    ap.add_argument("root", help="a GSR run folder, or a folder of them (a multirun)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if not Path(a.root).is_dir():
        raise FileNotFoundError(f"{a.root}: no such folder")
    found = collect_metrics(a.root)
    print(metrics_table(found))
    if a.json:
        write_json(a.json, found)
    return 0


if __name__ == "__main__":  # python -m gsr_train.runs.gsr table <folder>: the older form of gsr-train gsr-table
    import sys

    sys.exit(main(sys.argv[2:] if sys.argv[1:2] == ["table"] else sys.argv[1:]))
