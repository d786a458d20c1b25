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

Every run writes into its Hydra folder: ``checkpoints/*.ckpt`` (best on ``gsr.monitor``),
``model/`` (``save_pretrained`` folder with tokenizer and relation list), ``results_<split>
[_constrained].jsonl`` (project results format) and ``metrics.json`` (all figures, the
data summary and wall times).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig, OmegaConf

from gsr_train.runs.common import (
    PreflightError,
    cache_dir,
    fit_state,
    is_rank_zero,
    log_final_metrics,
    make_trainer,
    one_setting,
    output_dir,
    preflight,
    rank_batch,
    require_family,
    resolve_data_dir,
    resume_path,
    save_metrics,
)

if TYPE_CHECKING:
    from gsr_train.datamodules.gsr_chains import ChainQuestion
    from gsr_train.datamodules.gsr_data import Seq2SeqItem

log = logging.getLogger(__name__)
GSR_FAMILIES = ("t5", "minilm")  # model.family of the GSR models (conf/model/gsr_*.yaml)


@dataclass
class GSRData:
    """Everything the runner needs besides the model."""

    train: list  # ChainQuestion
    validation: list
    evaluation: list
    eval_split: str
    graph_index: Any  # KGIndex with one split `eval_split` holding the evaluation graphs in order
    kg_relations: list[str]
    subjects: dict[str, list[str]] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    has_graph: list[bool] = field(default_factory=list)  # per evaluation question
    walks: list = field(default_factory=list)  # WalkExample: multi-hop random-walk training examples


def _container(node) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def _llm_chains(cfg: DictConfig):
    path = cfg.gsr.get("llm_chains")
    if not path:
        return None
    from gsr_train.datamodules.gsr_data import load_llm_chains

    return load_llm_chains(path)


def _graph_splits(cfg: DictConfig) -> tuple[str, ...]:
    """``data.graph_splits``, or (null) every split file the graphs folder holds."""
    if cfg.data.get("graph_splits"):
        return tuple(cfg.data.graph_splits)
    from gsr_train.data.rows import find_split_file
    from gsr_train.eval.evaluate import DEFAULT_SPLITS

    present = []
    for split in DEFAULT_SPLITS:
        try:
            find_split_file(str(cfg.data.graphs), split)
            present.append(split)
        except FileNotFoundError:
            continue
    if not present:
        raise PreflightError(f"data.graphs={cfg.data.graphs}: no split file ({', '.join(DEFAULT_SPLITS)}) there")
    return tuple(present)


def _questions_with_graphs(cfg: DictConfig, evaluation: list, gidx) -> tuple[list, int]:
    """The evaluation questions to score and how many of them have no graph in ``gidx``.
    ``data.questions_without_graph``: ``error`` (the default: such a question could only score 0 in
    constrained decoding and answer coverage), ``skip`` (left out) or ``keep`` (scored, as misses
    where a graph is needed)."""
    policy = str(cfg.data.get("questions_without_graph") or "error")
    if policy not in ("error", "skip", "keep"):
        raise PreflightError(f"data.questions_without_graph={policy}: use error, skip or keep")
    known = {qid for graphs in gidx.splits.values() for qid in graphs.ids}
    kept = [q for q in evaluation if q.id in known]
    lost = len(evaluation) - len(kept)
    if lost and policy == "error":
        examples = ", ".join(q.id for q in evaluation if q.id not in known)[:200]
        raise PreflightError(
            f"{lost} of {len(evaluation)} evaluation questions of {cfg.data.name} [{cfg.gsr.eval_split}] have no graph "
            f"in data.graphs={cfg.data.graphs} (splits {', '.join(gidx.splits)}; e.g. {examples}): point "
            "data.graphs at the RoG-format folder holding these question ids, or set "
            "data.questions_without_graph=skip (evaluate only the questions that have one) or =keep (score them "
            "as misses wherever a graph is needed)"
        )
    if lost:
        log.warning(
            "%d of %d evaluation questions have no graph in %s: %s (data.questions_without_graph=%s)",
            lost,
            len(evaluation),
            cfg.data.graphs,
            "left out" if policy == "skip" else "misses in constrained decoding and coverage",
            policy,
        )
    if not kept:
        raise PreflightError(f"no evaluation question of {cfg.data.name} has a graph in data.graphs={cfg.data.graphs}")
    return (kept if policy == "skip" else evaluation), lost


def _gather_graphs(index, ids: list[str]):
    """One SplitGraphs with the graph of every id, in order (an empty graph when no split has it)."""
    from gsr_train.kg.index import KGIndex, QuestionGraph, _concat

    where: dict[str, tuple[str, int]] = {}
    for split, graphs in index.splits.items():
        for i, qid in enumerate(graphs.ids):
            where.setdefault(qid, (split, i))
    parts, missing = [], 0
    for qid in ids:
        if qid in where:
            s, i = where[qid]
            parts.append(index[s].graph(i))
        else:
            missing += 1
            z = torch.zeros(0, dtype=torch.long)
            parts.append(
                QuestionGraph(
                    qid,
                    "",
                    [],
                    z,
                    torch.zeros(2, 0, dtype=torch.long),
                    z,
                    torch.zeros(0, dtype=torch.bool),
                    torch.zeros(0, dtype=torch.bool),
                )
            )
    merged = _concat(parts)
    has_graph = [qid in where for qid in ids]
    return KGIndex(index.entities, index.relations, {"eval": merged}, {}), has_graph, missing


def apply_holdout(
    cfg: DictConfig, train: list, validation: list, extra_chains: dict | None = None
) -> tuple[list, list, dict]:
    """``gsr.holdout.fraction`` of the training chains' relations held out (by name hash); every
    training and validation question whose ground, training or LLM chains use one is dropped."""
    from gsr_train.datamodules.gsr_data import chain_relations
    from gsr_train.datamodules.relation_holdout import drop_questions_using, held_out_relations

    h = cfg.gsr.get("holdout") or {}
    fraction = float(h.get("fraction") or 0.0)
    if fraction <= 0.0 or not train:
        return train, validation, {}
    held = held_out_relations(chain_relations(train), fraction, int(h.get("seed", 0)))
    before = len(train)
    train, dropped_train = drop_questions_using(train, held, extra_chains)
    validation, dropped_val = drop_questions_using(validation, held, extra_chains)
    if not train:
        raise PreflightError(f"gsr.holdout.fraction={fraction}: no training question is left")
    info = {
        "fraction": fraction,
        "seed": int(h.get("seed", 0)),
        "relations_held_out": len(held),
        "train_kept": len(train),
        "train_dropped": dropped_train,
        "validation_dropped": dropped_val,
    }
    log.info(
        "leave relations out: %d relations held out; %d of %d training questions kept", len(held), len(train), before
    )
    return train, validation, info


def walk_options(cfg: DictConfig):
    """``gsr.walks`` through its recipe (:class:`~gsr_train.runs.recipes.GSRWalks`: one place for defaults)."""
    from gsr_train.runs.recipes import GSRWalks

    return GSRWalks(**(_container(cfg.gsr.get("walks")) or {}))


def random_walks(cfg: DictConfig, index, splits: tuple, default_starts: str, exclude=()) -> list:
    """``gsr.walks``: composed multi-hop examples from random walks over ``splits``' graphs
    (``starts: auto`` = topic entities for a RoG dataset, named entities for a shared KG)."""
    from gsr_train.datamodules.gsr_walks import sample_walks, walk_examples

    w = walk_options(cfg)
    if w.count <= 0:
        return []
    walks = sample_walks(
        index,
        splits,
        count=w.count,
        min_hops=w.min_hops,
        max_hops=w.max_hops,
        starts=default_starts if w.starts == "auto" else w.starts,
        exclude=exclude,
        drop_prefixes=tuple(cfg.gsr.filter.get("drop_prefixes") or ()),
        seed=int(cfg.seed),
    )
    return walk_examples(walks, seed=int(cfg.seed))


def check_walks(cfg: DictConfig) -> None:
    """``gsr.walks`` mistakes, before any data work."""
    from gsr_train.datamodules.gsr_walks import STARTS

    w = walk_options(cfg)
    if w.count <= 0:
        return
    problems = []
    if w.prefix not in ("retrieval", "index"):
        problems.append(f"gsr.walks.prefix must be retrieval | index, got {w.prefix!r}")
    if w.starts not in ("auto", *STARTS):
        problems.append(f"gsr.walks.starts must be one of {('auto', *STARTS)}, got {w.starts!r}")
    if not 1 <= w.min_hops <= w.max_hops:
        problems.append(f"gsr.walks needs 1 <= min_hops <= max_hops, got {w.min_hops}..{w.max_hops}")
    if w.ratio <= 0:
        problems.append(
            f"gsr.walks.count={w.count} needs gsr.walks.ratio > 0 (walk examples per "
            f"retrieval question and epoch), got {w.ratio}"
        )
    if problems:
        raise PreflightError("; ".join(problems))


def walk_counts(walks: list) -> dict:
    if not walks:
        return {}
    from gsr_train.datamodules.gsr_walks import walk_summary

    return walk_summary(walks)


def prepare_paths_data(cfg: DictConfig) -> GSRData:
    """Chain-supervision rows (webqsp_paths) + graphs of a RoG dataset sharing the ids."""
    from gsr_train.datamodules.gsr_data import load_path_rows, questions_from_paths, relation_subjects
    from gsr_train.runs.common import load_kg_index

    g = cfg.gsr
    rows = {s: load_path_rows(cfg.data.dir, s) for s in cfg.data.splits}
    variant = g.variant
    training = not g.get("eval_only")
    llm = _llm_chains(cfg)
    # the rows are read anyway: eval-only runs of models that did not record their training
    # chains' relations take the seen / unseen groups from this training split
    train = questions_from_paths(rows["train"], variant, llm, _container(g.get("filter"))) if "train" in rows else []
    validation = questions_from_paths(rows.get("validation", []), "raw") if training else []
    gpt = {
        r.id: [*(r.llm_paths or []), *((llm or {}).get(r.id) or [])]  # GPT chains count for the holdout too
        for s in ("train", "validation")
        for r in rows.get(s, [])
    }
    train, validation, holdout = apply_holdout(cfg, train, validation, gpt)
    evaluation = questions_from_paths(rows[g.eval_split], "raw")
    graph_index, has_graph, missing = None, [False] * len(evaluation), len(evaluation)
    kg_relations: list[str] = []
    subjects: dict[str, list[str]] = {}
    walks: list = []
    without_graph = 0
    if not cfg.data.get("graphs") and "constrained" in g.get("eval_modes", []):
        raise PreflightError(
            f"gsr.eval_modes has constrained, which decodes on each question's graph, but "
            f"{cfg.data.name} is chain files and data.graphs is not set: point data.graphs at the "
            "RoG-format folder holding the questions' graphs, or set gsr.eval_modes=[unconstrained]"
        )
    if cfg.data.get("graphs"):
        graph_splits = _graph_splits(cfg)
        gidx = load_kg_index(cfg, source=cfg.data.graphs, splits=graph_splits)
        evaluation, without_graph = _questions_with_graphs(cfg, evaluation, gidx)
        graph_index, has_graph, missing = _gather_graphs(gidx, [q.id for q in evaluation])
        kg_relations = list(gidx.relations)
        eval_graphs = graph_index["eval"]
        topics = {gidx.entities[int(e)] for e in eval_graphs.entity_ids[eval_graphs.topic_mask].tolist()}
        subjects = relation_subjects(
            gidx, graph_splits, exclude=topics, per_relation=int(g.index.subjects_per_relation), seed=int(cfg.seed)
        )
        if training:  # the KG is shared with the evaluation questions: no walk starts at their topics
            walks = random_walks(cfg, gidx, graph_splits, "named", exclude=topics)
    summary = {
        "layout": "paths",
        "eval_without_graph": without_graph,
        "train_questions": len(train),
        "train_chains": sum(len(q.chains) for q in train),
        "variant": variant,
        "eval_questions": len(evaluation),
        "eval_with_graph": int(sum(has_graph)),
        "holdout": holdout,
        **walk_counts(walks),
    }
    return GSRData(
        train, validation, evaluation, "eval", graph_index, kg_relations, subjects, summary, has_graph, walks
    )


def prepare_rog_data(cfg: DictConfig) -> GSRData:
    """A RoG-format dataset: chains from the KG supervision, graphs from the KG index."""
    from gsr_train.datamodules.gsr_data import questions_from_kg, relation_subjects
    from gsr_train.kg.index import KGIndex
    from gsr_train.kg.paths import get_supervision
    from gsr_train.runs.common import load_kg_index

    g = cfg.gsr
    index = load_kg_index(cfg, evaluate=[g.eval_split])
    sup = {s: get_supervision(index, s, cache_dir(cfg)) for s in cfg.data.splits}
    training = not g.get("eval_only")  # evaluation needs only the split it scores
    train: list[ChainQuestion] = []
    validation: list[ChainQuestion] = []
    subjects: dict[str, list[str]] = {}
    holdout: dict[str, Any] = {}
    walks: list = []
    if training:
        train = questions_from_kg(index, "train", sup["train"], g.variant, _llm_chains(cfg))
        validation = questions_from_kg(index, "validation", sup["validation"], "raw") if "validation" in sup else []
        train, validation, holdout = apply_holdout(cfg, train, validation, _llm_chains(cfg))
        subjects = relation_subjects(
            index, ("train",), per_relation=int(g.index.subjects_per_relation), seed=int(cfg.seed)
        )
        walks = random_walks(cfg, index, ("train",), "topics")
    evaluation = questions_from_kg(index, g.eval_split, sup[g.eval_split], "raw")
    graph_index = KGIndex(index.entities, index.relations, {"eval": index[g.eval_split]}, {})
    summary = {
        "layout": "rog",
        "train_questions": len(train),
        "train_chains": sum(len(q.chains) for q in train),
        "variant": g.variant,
        "eval_questions": len(evaluation),
        "eval_with_graph": len(evaluation),
        "holdout": holdout if training else {},
        **walk_counts(walks),
    }
    return GSRData(
        train,
        validation,
        evaluation,
        "eval",
        graph_index,
        list(index.relations),
        subjects,
        summary,
        [True] * len(evaluation),
        walks,
    )


def relation_vocab(cfg: DictConfig, data: GSRData) -> list[str]:
    """``kg``: KG relations + training-chain relations; ``chains``: training chains only;
    ``file``: a vocabulary file (``gsr.relations.file``, ``keep``) + training-chain relations;
    ``all``: the KG's, the file's and the training chains' relations (indexing data for every one)."""
    from gsr_train.datamodules.gsr_data import chain_relations
    from gsr_train.features.relation_tokens import load_relation_file, merge_vocab

    src = cfg.gsr.relations.source
    train_rels = chain_relations(data.train)
    if src == "kg":
        return merge_vocab(data.kg_relations, train_rels)
    if src == "chains":
        return merge_vocab(train_rels)
    if src in ("file", "all"):
        if not cfg.gsr.relations.get("file"):
            raise PreflightError(
                f"gsr.relations.source={src} needs gsr.relations.file (e.g. "
                "${paths.shared_data}/freebase_relations.txt)"
            )
        listed = load_relation_file(cfg.gsr.relations.file, cfg.gsr.relations.get("keep", "relations"))
        return merge_vocab(listed, train_rels) if src == "file" else merge_vocab(data.kg_relations, listed, train_rels)
    raise ValueError(f"gsr.relations.source must be kg | chains | file | all, got {src!r}")


def build_datamodule(cfg: DictConfig, data: GSRData, gsr):
    from gsr_train.datamodules.gsr_data import (
        GSRDataModule,
        index_items,
        load_index_file,
        pseudo_questions,
        retrieval_items,
        walk_items,
    )
    from gsr_train.features.relation_tokens import INDEX_PREFIX, RETRIEVAL_PREFIX

    g = cfg.gsr
    retrieval, counts = retrieval_items(data.train, gsr.relations)
    val_q = [q for q in data.validation if q.ground]
    if g.get("max_val_questions"):
        val_q = val_q[: int(g.max_val_questions)]
    from gsr_train.datamodules.gsr_data import ChainQuestion

    val_q = [ChainQuestion(q.id, q.question, q.ground, q.ground) for q in val_q]
    validation, vcounts = retrieval_items(val_q, gsr.relations, strict=False, require_targets=False)
    index_pool = []
    if g.schedule != "retrieval":
        sources = load_index_file(g.index.templates) if g.index.get("templates") else None
        rels = gsr.relations.relations
        if g.index.relations == "kg":
            kg = set(data.kg_relations)
            rels = [r for r in rels if r in kg]
        elif g.index.relations == "subjects":
            rels = [r for r in rels if r in data.subjects]
        examples = pseudo_questions(
            rels,
            data.subjects,
            sources,
            per_relation=int(g.index.per_relation),
            seed=int(cfg.seed),
            fallback_subject=bool(g.index.fallback_subject),
        )
        index_pool = index_items(examples, gsr.relations)
    focus = None
    share = g.index.get("kg_share")
    if share is not None and index_pool:  # weight the indexing sample toward the KG's (and chains') relations
        from gsr_train.datamodules.gsr_data import chain_relations

        lookup = gsr.relations.lookup
        wanted = {lookup[r] for r in (*data.kg_relations, *chain_relations(data.train)) if r in lookup}
        focus = [it.targets[0][0] in wanted for it in index_pool]
        data.summary["index_focus"] = sum(focus)
    walks = walk_options(cfg)
    walk_pool: list[Seq2SeqItem] = []
    walk_dropped = 0
    if data.walks:
        prefix = {"retrieval": RETRIEVAL_PREFIX, "index": INDEX_PREFIX}[walks.prefix]
        walk_pool, walk_dropped = walk_items(data.walks, gsr.relations, prefix)
        if walk_dropped:
            data.summary["walks_outside_vocab"] = walk_dropped
    data.summary.update(
        {
            "walk_pool": len(walk_pool),
            "retrieval_items": len(retrieval),
            "retrieval_targets": sum(len(i.targets) for i in retrieval),
            "index_pool": len(index_pool),
            "validation_items": len(validation),
            **{f"train_{k}": v for k, v in counts.items()},
            **{f"val_{k}": v for k, v in vcounts.items()},
        }
    )
    return GSRDataModule(
        gsr,
        retrieval,
        index_pool,
        validation,
        schedule=g.schedule,
        index_epochs=int(g.get("index_epochs", 0)),
        index_ratio=float(g.index_ratio),
        batch_size=rank_batch(cfg, int(cfg.model.batch_size), "model.batch_size"),
        eval_batch_size=int(g.get("eval_batch_size", 64)),
        seed=int(cfg.seed),
        max_targets=g.get("max_targets"),
        walk_pool=walk_pool,
        walk_ratio=walks.ratio,
        index_focus=focus,
        focus_share=None if focus is None else float(share),
    )


def train_gsr(cfg: DictConfig, data: GSRData, gsr):
    """Fit; returns (best checkpoint path or None, training seconds)."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    from gsr_train.datamodules.triple_datamodule import RankSampler
    from gsr_train.models.gsr.module import GSRModule

    dm = build_datamodule(cfg, data, gsr)
    max_epochs = int(cfg.trainer.max_epochs)
    accum = int(cfg.trainer.get("accumulate_grad_batches", 1) or 1)
    module = GSRModule(
        gsr,
        optim=_container(cfg.model.optim),
        val_decode=_container(cfg.gsr.val_decode),
        total_steps=None,
        weighting=cfg.gsr.get("loss_weighting", "question"),
    )
    monitor = cfg.gsr.monitor
    has_val = bool(dm.validation)
    ckpt = ModelCheckpoint(
        dirpath=str(output_dir(cfg) / "checkpoints"),
        filename="best-epoch{epoch:02d}",
        auto_insert_metric_name=False,
        save_top_k=1,
        monitor=monitor if has_val else None,
        mode="min" if monitor.endswith("loss") else "max",
        save_last=False,
        enable_version_counter=False,
    )
    trainer = make_trainer(
        cfg, callbacks=[ckpt], reload_dataloaders_every_n_epochs=1, **({} if has_val else {"limit_val_batches": 0})
    )
    # optimiser steps of the whole run on each rank (DDP: every rank holds 1/W of an epoch's items)
    world = int(trainer.world_size)
    total = sum(
        math.ceil(
            -(-len(RankSampler(len(dm.epoch_items(e)), shuffle=False, num_replicas=world, rank=0)) // dm.batch_size)
            / accum
        )
        for e in range(max_epochs)
    )
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


def evaluate_gsr(cfg: DictConfig, data: GSRData, gsr, constrained: bool, write: bool = True) -> dict:
    from gsr_train.datamodules.gsr_data import chain_relations
    from gsr_train.datamodules.relation_holdout import vocabulary_groups
    from gsr_train.models.gsr.decoding import DecodeConfig
    from gsr_train.retrievers.gsr import GSRRetriever, evaluate, write_gsr_results

    decode = DecodeConfig.from_any({**_container(cfg.gsr.decode), "constrained": constrained})
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
    """The tail's row of one decoding mode: chain match and answer coverage at ``decode.top_n``."""
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
        int(cfg.gsr.decode.top_n),
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


def run(cfg: DictConfig) -> float | None:
    from gsr_train.datamodules.gsr_data import chain_relations
    from gsr_train.models.gsr.modeling import build_gsr_model, load_gsr, resolve_pretrained

    g = cfg.gsr
    require_family(cfg, GSR_FAMILIES, "gsr")
    one_setting(cfg, "model.epochs")
    for mode in g.get("eval_modes", ["unconstrained"]):
        if mode not in ("unconstrained", "constrained"):
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
    t0 = time.perf_counter()
    data = prepare_paths_data(cfg) if cfg.data.get("format") == "paths" else prepare_rog_data(cfg)
    if g.get("max_eval_questions"):  # smoke runs: evaluate on the first questions only
        n = min(int(g.max_eval_questions), len(data.evaluation))  # a split can be smaller
        data.evaluation = data.evaluation[:n]
        data.has_graph = data.has_graph[:n]
        if data.graph_index is not None:
            from gsr_train.kg.index import KGIndex

            gi = data.graph_index
            data.graph_index = KGIndex(gi.entities, gi.relations, {"eval": gi["eval"].subset(range(n))}, {})
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
    trainer = None
    if g.get("eval_only"):
        gsr = load_gsr(g.eval_only)
        best, train_seconds, fit_info = str(g.eval_only), 0.0, {}
    else:
        relations = relation_vocab(cfg, data)
        gsr = build_gsr_model(_container(cfg.model), relations)
        gsr.chain_relations = sorted(chain_relations(data.train))  # travels in checkpoints and the saved folder
        best, train_seconds, fit_info = train_gsr(cfg, data, gsr)
        trainer = fit_info.pop("trainer")
        if not is_rank_zero():  # DDP (subprocess launch): rank 0 alone evaluates and writes
            return None
        if best:
            gsr = load_gsr(best)
        gsr.save_pretrained(output_dir(cfg) / "model")
    figures["unknown_relations"] = unknown_relations(data, gsr)
    if figures["unknown_relations"]["kg_relations_without_token"]:
        log.info("relations the model has no token for: %s", figures["unknown_relations"])
    figures.update(
        {
            "data": data.summary,
            "num_relations": len(gsr.relations),
            "checkpoint": best,
            "fit": fit_info,
            "prep_seconds": prep_seconds,
            "train_seconds": train_seconds,
            "parameters": sum(p.numel() for p in gsr.parameters()),
        }
    )
    modes = list(g.get("eval_modes", ["unconstrained"]))
    for mode in modes:
        if mode not in ("unconstrained", "constrained"):
            raise ValueError(f"gsr.eval_modes entries must be unconstrained | constrained, got {mode!r}")
        figures[mode] = evaluate_gsr(cfg, data, gsr, constrained=(mode == "constrained"))
    figures["tables"] = {"overall": match_table(figures, modes)}
    print(figures["tables"]["overall"])
    save_metrics(cfg, _fingerprint(cfg), [_metrics_row(cfg, mode, figures[mode], best) for mode in modes], figures)
    main = figures[modes[0]]["chain_match"] if modes else {}
    log_final_metrics(
        trainer, {f"test/{mode}/{k}": v for mode in modes for k, v in figures[mode].get("chain_match", {}).items()}
    )
    return main.get(f"match@{int(g.decode.top_n)}")


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
