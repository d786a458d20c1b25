"""Runners of OKGQA's open-ended evaluation (`gsr_train.openended`):

* ``open_ended`` (``+experiment=okgqa_open_ended``): questions -> long-form answers in every
  ``open_ended.forms`` (``none``: closed book) -> FActScore against the KG with two verifiers,
  their agreement, and G-Eval; the judge calibration is printed first;
* ``judge_calibration`` (``+experiment=okgqa_calibration``): the calibration alone;
* ``open_ended_perturbed`` (``+experiment=okgqa_perturbed``): the same per perturbation method x
  level x form of the OKGQA-P grid, one table and one plot (the paper's Figure 5).

Every LLM answer goes through the response cache as it arrives, so ``resume=auto`` after a kill
asks only what had not been answered; every file is written atomically at the end.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from gsr_train.config import as_dict
from gsr_train.eval.fact_check import EncoderVerifier
from gsr_train.eval.tail import metrics_row
from gsr_train.io import atomic_write, write_jsonl
from gsr_train.llm.cache import ResponseCache
from gsr_train.llm.local_model import local_endpoint, require_endpoint
from gsr_train.llm.runner import read_jsonl
from gsr_train.openended.calibration import calibrate_judges, calibration_set, calibration_table
from gsr_train.openended.kg_questions import questions_folder
from gsr_train.openended.pipeline import (
    Condition,
    JudgeOptions,
    Judges,
    Questions,
    graph_knowledge,
    judge_conditions,
    knowledge_sources,
    make_cases,
)
from gsr_train.openended.questions import load_questions
from gsr_train.openended.report import condition_rows, conditions_table, grid_plot
from gsr_train.openended.stages import GEvalOptions
from gsr_train.options.preflight import OpenEndedOptionError, check_open_ended, check_perturbations
from gsr_train.robustness.kge import get_scorer
from gsr_train.robustness.perturb import perturb
from gsr_train.robustness.similarity import similarity
from gsr_train.runtime.device import run_device
from gsr_train.runtime.run_data import (
    cache_dir,
    encoder_options,
    load_kg_index,
    output_dir,
    run_encoder,
    run_top_k,
    save_metrics,
    with_kg_graphs,
)
from gsr_train.text.embeddings import get_embeddings

log = logging.getLogger(__name__)


@dataclass
class _Setup:
    index: Any
    split_name: str
    qs: Any  # gsr_train.openended.pipeline.Questions
    counts: dict
    emb: Any  # KG embeddings (classic forms), or None
    judges: Any
    opts: Any  # JudgeOptions
    results: dict
    classic: dict | None = None  # the classic retrievers' options (the evidence forms)
    graphs: list = field(default_factory=list)  # each question's original graph as knowledge lines


def _options(cfg: DictConfig):

    oe = cfg.open_ended
    g = oe.geval
    return JudgeOptions(
        top_k=run_top_k(cfg),
        answer_tokens=int(oe.answer_tokens),
        answer_params=_answer_params(cfg),
        facts=str(oe.facts),
        fact_tokens=int(oe.fact_tokens),
        max_facts=int(oe.max_facts),
        knowledge=str(oe.knowledge),
        encoder_candidates=int(oe.encoder_candidates),
        llm_lines=int(oe.llm_lines),
        verifiers=tuple(oe.verifiers),
        gamma=int(oe.gamma),
        geval=GEvalOptions(tuple(g.criteria), str(g.method), int(g.samples), float(g.temperature), int(g.max_tokens)),
    )


def _answer_params(cfg: DictConfig) -> dict:
    """``repetition_penalty`` goes to the project's own server (``llm.autostart``), which takes it (a
    135M model loops without it); OpenAI refuses unknown fields, vLLM takes it via ``llm.extra_params``."""
    penalty = cfg.open_ended.get("repetition_penalty")
    return {"repetition_penalty": float(penalty)} if penalty and cfg.llm.get("autostart") else {}


def _load_questions(cfg: DictConfig, split_name: str, known: set[str] | None) -> tuple[list, dict]:
    """``open_ended.questions`` (the first ``max_questions``; with ``known`` only those about these
    graphs), the skips logged and counted."""
    oe = cfg.open_ended
    own_graphs = _questions_are_data(cfg)  # the data holds the studied questions' graphs: filtered below
    try:
        questions, counts = load_questions(
            str(oe.questions),
            known_graph_ids=None if own_graphs else known,
            skip_unknown=bool(oe.skip_unknown),
            skip_no_entity=bool(oe.get("skip_no_entity", False)),
        )
    except ValueError as e:
        raise OpenEndedOptionError(
            f"open_ended.questions={oe.questions} against {_data_name(cfg)} [{split_name}]: {e}"
        ) from None
    skipped = {k: int(counts.get(k) or 0) for k in ("skipped_no_entity", "skipped_unknown_graph")}
    rows = len(questions) + sum(skipped.values())
    if oe.get("max_questions"):
        skipped["beyond_max_questions"] = max(0, len(questions) - int(oe.max_questions))
        questions = questions[: int(oe.max_questions)]
    if own_graphs and known is not None:  # data.skip_invalid left out those whose entities the KG lacks
        kept = [q for q in questions if q.graph_id in known]
        counts["skipped_not_in_kg"] = len(questions) - len(kept)
        questions = kept
    if not questions:
        raise OpenEndedOptionError(f"open_ended.questions={oe.questions}: no question about a graph of {split_name}")
    if known is not None:
        _log_used(str(oe.questions), len(questions), rows, {**skipped, "not_in_kg": counts.get("skipped_not_in_kg")})
    return questions, dict(counts)


def _log_used(questions: str, used: int, rows: int, counts: dict) -> None:
    """``open_ended.questions=F: 788 of 794 questions used (6 no entity)``: what became of every row."""
    beyond = counts.pop("beyond_max_questions", 0)
    why = ", ".join(f"{n} {k.removeprefix('skipped_').replace('_', ' ')}" for k, n in counts.items() if n)
    said = [f"{why} skipped, counted in metrics.json"] if why else []
    said += [f"{beyond} beyond open_ended.max_questions"] if beyond else []
    log.info(
        "open_ended.questions=%s: %d of %d questions used%s",
        questions,
        used,
        rows,
        f" ({'; '.join(said)})" if said else "",
    )


def _questions_are_data(cfg: DictConfig) -> bool:
    """``data.kg`` with a question file: each question's graph is cut from the KG around its entities."""
    return bool(cfg.data.get("kg")) and str(cfg.open_ended.questions) != "embedded"


def _data_name(cfg: DictConfig) -> str:
    if _questions_are_data(cfg):
        return f"{Path(str(cfg.open_ended.questions)).name} on {cfg.data.kg}"
    return str(cfg.data.name)


def _open_index(cfg: DictConfig, split_name: str):
    """The graphs asked about: the data's rows, or (`_questions_are_data`) the questions' own rows
    with the graphs cut from ``data.kg`` (`gsr_train.openended.kg_questions`)."""
    if not _questions_are_data(cfg):
        return load_kg_index(cfg, evaluate=[split_name])
    questions, _ = _load_questions(cfg, split_name, None)
    folder = questions_folder(questions, split_name, cache_dir(cfg), str(cfg.open_ended.get("entity_prefix") or ""))
    source = with_kg_graphs(cfg, folder, [split_name])
    return load_kg_index(cfg, source=source, splits=[split_name])  # open-ended: no answer entities to require


def _questions(cfg: DictConfig, index, split_name: str, encoder):
    """The questions under study (the first ``max_questions``) with their graphs and embeddings."""
    graphs = index[split_name]
    where = {g: i for i, g in enumerate(graphs.ids)}
    questions, counts = _load_questions(cfg, split_name, set(where))
    texts = [q.question for q in questions]
    qs = Questions(
        [q.id for q in questions],
        texts,
        [q.graph_id for q in questions],
        graphs.subset([where[q.graph_id] for q in questions]),
        encoder.encode(texts).float(),
    )
    return qs, counts


def _judges(cfg: DictConfig, llm_cfg: dict, encoder, opts):
    """The stages' LLM endpoint and cache (the run's cache folder unless llm.cache_path says) and
    the encoder verifier."""
    path = llm_cfg.get("cache_path") or cache_dir(cfg) / "llm" / "responses.sqlite"
    cache = ResponseCache(path) if llm_cfg.get("use_cache", True) else None
    verifier = EncoderVerifier(encoder, opts.encoder_candidates) if "encoder" in opts.verifiers else None
    return Judges(llm_cfg, cache, verifier, None)


def _setup(cfg: DictConfig, llm_cfg: dict, forms: list[str], needs_llm: bool = True) -> _Setup:
    """Everything a run needs, after every option was checked (and the LLM endpoint found listening,
    before the embeddings and the answers)."""
    results = {label: {r["id"]: r for r in read_jsonl(path)} for label, path in check_open_ended(cfg, forms).items()}
    opts = _options(cfg)
    torch.set_num_threads(int(cfg.open_ended.get("threads") or 1))
    split_name = str(cfg.get("split", "test"))
    index = _open_index(cfg, split_name)
    encoder = run_encoder(cfg)
    qs, counts = _questions(cfg, index, split_name, encoder)
    if needs_llm:
        require_endpoint(llm_cfg)  # nothing listening: one line now, not after every request's retries
    classic = any(f in ("triplets", "paths", "subgraphs") for f in forms)
    emb = get_embeddings(index, encoder_options(cfg), cache_dir(cfg), splits=[split_name]) if classic else None
    classic_opts = {k: v for k, v in as_dict(cfg.classic).items() if k != "method"} if cfg.get("classic") else None
    judges = _judges(cfg, llm_cfg, encoder, opts)
    return _Setup(index, split_name, qs, counts, emb, judges, opts, results, classic_opts, graph_knowledge(qs, index))


def _calibrate(cfg: DictConfig, s: _Setup) -> dict:
    """The judge calibration on the studied graphs; sets the encoder verifier's threshold; printed."""
    c = cfg.open_ended.calibration
    facts = calibration_set(s.qs.split, s.index, int(c.per_question), c.get("max_facts"), int(c.seed))
    report = calibrate_judges(facts, s.graphs, s.judges, s.opts)
    if "encoder" in report:
        s.judges.threshold = float(report["encoder"]["threshold"])
    report["table"] = calibration_table(report, str(s.judges.llm.get("model")))
    print(report["table"], flush=True)
    return report


def _run_with(cfg: DictConfig, forms: list[str], body) -> Any:
    """``body(setup, t0)`` with the LLM endpoint answering (served here when ``llm.autostart``) and
    the response cache closed after it (every answer in it is committed already)."""
    check_open_ended(cfg, forms)  # every option, the question file and data.kg: before the LLM server starts
    llm_cfg = as_dict(cfg.llm)
    needs_llm = "llm" in cfg.open_ended.verifiers or cfg.runner != "judge_calibration"
    served_here = local_endpoint(llm_cfg, cache_dir(cfg), run_device(cfg)) if needs_llm else None
    with served_here or contextlib.nullcontext(llm_cfg) as served:
        t0 = time.perf_counter()
        s = _setup(cfg, served, forms, needs_llm)
        try:
            return body(s, t0)
        finally:
            s.judges.close()


def run_calibration(cfg: DictConfig) -> dict:
    """``+experiment=okgqa_calibration``: each verifier's accuracy and AUC on true / perturbed KG facts."""

    def body(s: _Setup, t0: float) -> dict:
        report = _calibrate(cfg, s)
        rows = [_calibration_row(name, report[name], s.split_name) for name in ("encoder", "llm") if name in report]
        details = {"calibration": report, "llm_usage": s.judges.usage, "questions": s.counts}
        details["total_seconds"] = round(time.perf_counter() - t0, 2)
        _write(cfg, s, rows, details, "calibration.md", report["table"])
        return details

    return _run_with(cfg, ["none"], body)


def _calibration_row(name: str, r: dict, split: str) -> dict:

    keys = ("auc", "accuracy", "accuracy_at_0.5")  # shares (thresholds and counts: metrics.json details)
    return metrics_row(f"verifier-{name}", split, None, {k: r.get(k) for k in keys if k in r}, verifier=name)


def _write(cfg: DictConfig, s: _Setup, rows: list, details: dict, md_name: str, md: str, answers=None) -> None:
    """metrics.json, the markdown report and (when given) the per-answer rows, each atomically."""
    out = output_dir(cfg)
    if answers is not None:
        write_jsonl(out / f"open_ended_{s.split_name}.jsonl", answers)
    with atomic_write(out / md_name, "w") as f:
        f.write(md + "\n")
    save_metrics(cfg, s.index.key, rows, details, _data_name(cfg))
    print(
        f"\nwrote {out / md_name}, {out / 'metrics.json'}"
        + (f", {out / f'open_ended_{s.split_name}.jsonl'}" if answers is not None else "")
    )


def _judge_all(s: _Setup, conditions: list) -> tuple[dict, list[dict]]:
    """Every condition answered and judged together (`gsr_train.openended.pipeline.judge_conditions`)."""
    t0 = time.perf_counter()
    groups = {c.label: make_cases(s.qs, c, s.index, s.emb, s.opts, s.classic, s.results) for c in conditions}
    figures, rows = judge_conditions(groups, knowledge_sources(s.opts.knowledge, s.graphs), s.judges, s.opts)
    for label, f in figures.items():
        log.info("%s: %s", label, _summary_line(f))
    log.info("%d conditions judged in %.0f s", len(conditions), time.perf_counter() - t0)
    return figures, rows


def _summary_line(f: dict) -> str:
    parts = [f"{f['answered']}/{f['cases']} answered"]
    for v in ("encoder", "llm"):
        if f.get(v) and f[v]["factscore"] is not None:
            parts.append(f"FActScore[{v}] {f[v]['factscore']:.3f} hallucination {f[v]['hallucination_ratio']:.3f}")
    return ", ".join(parts)


def run_open_ended(cfg: DictConfig) -> dict:
    """``+experiment=okgqa_open_ended``: calibration, then every form answered and judged."""
    forms = list(cfg.open_ended.forms)

    def body(s: _Setup, t0: float) -> dict:
        calibration = _calibrate(cfg, s)
        figures, answers = _judge_all(s, [Condition(f, f, s.qs.split) for f in forms])
        table = conditions_table(figures, f"{_data_name(cfg)} [{s.split_name}], {len(s.qs.ids)} questions")
        print(table, flush=True)
        details = _details(s, figures, calibration, t0)
        rows = condition_rows(figures, s.split_name, run_top_k(cfg), {f: {"form": f} for f in forms})
        _write(cfg, s, rows, details, "open_ended.md", calibration["table"] + "\n\n" + table, answers)
        return details

    return _run_with(cfg, forms, body)


def _details(s: _Setup, figures: dict, calibration: dict, t0: float) -> dict:
    return {
        "conditions": figures,
        "calibration": calibration,
        "encoder_threshold": s.judges.threshold,
        "questions": {**s.counts, "studied": len(s.qs.ids)},
        "llm": {"model": s.judges.llm.get("model"), "base_url": s.judges.llm.get("base_url")},
        "llm_usage": s.judges.usage,
        "total_seconds": round(time.perf_counter() - t0, 2),
    }


def run_perturbed(cfg: DictConfig) -> dict:
    """``+experiment=okgqa_perturbed``: the open-ended evaluation per perturbation x level x form."""
    forms = list(cfg.open_ended.forms)
    check_perturbations(cfg)

    def body(s: _Setup, t0: float) -> dict:
        calibration = _calibrate(cfg, s)
        conditions, labels, similarity = _perturbed_conditions(cfg, s, forms)
        figures, answers = _judge_all(s, conditions)
        seed = int(cfg.open_ended.perturb.seed)
        title = f"{_data_name(cfg)} [{s.split_name}], {len(s.qs.ids)} questions, seed {seed}"
        table = conditions_table(figures, title, labels)
        print(table, flush=True)
        details = {**_details(s, figures, calibration, t0), "grid": labels, "similarity": similarity}
        rows = condition_rows(figures, s.split_name, run_top_k(cfg), labels)
        out = output_dir(cfg)
        pngs = [grid_plot(figures, labels, out / f"okgqa_perturbed_{m}.png", m, title) for m in _PLOTTED]
        _write(cfg, s, rows, details, "okgqa_perturbed.md", calibration["table"] + "\n\n" + table, answers)
        print("plots: " + ", ".join(str(p) for p in pngs))
        return details

    return _run_with(cfg, forms, body)


_PLOTTED = ("encoder_mean_support", "hallucination_llm")  # support: the encoder's view before its threshold


def _perturbed_conditions(cfg: DictConfig, s: _Setup, forms: list[str]) -> tuple[list, dict, list]:
    """The grid's conditions (closed book once, each evidence form on the original graphs and on
    every perturbed copy), their labels, and each perturbed copy's similarity to the original."""
    p = cfg.open_ended.perturb
    scorer = get_scorer(s.qs.split, len(s.index.relations), as_dict(p.kge), cache_dir(cfg))
    conditions, labels, sims = [], {}, []
    for form in forms:
        conditions.append(Condition(form, form, s.qs.split))
        labels[form] = {"form": form, "perturbation": "none", "level": 0.0}
    for method in p.methods:
        for level in (float(x) for x in p.levels if float(x) > 0):
            pert = perturb(s.qs.split, method, level, int(p.seed), scorer=scorer)
            sims.append({"method": method, "level": level, **similarity(s.qs.split, pert.split, scorer).to_dict()})
            for form in forms:
                if form == "none":
                    continue  # the closed book reads no graph
                label = f"{form}@{method}:{level:g}"
                conditions.append(Condition(label, form, pert.split))
                labels[label] = {"form": form, "perturbation": method, "level": level}
    return conditions, labels, sims
