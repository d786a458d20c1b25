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
from gsr_train.options.check import built
from gsr_train.options.preflight import OpenEndedOptionError, check_open_ended, check_perturbations
from gsr_train.options.recipes import OpenEndedRun
from gsr_train.robustness.kge import get_scorer
from gsr_train.robustness.perturb import perturb
from gsr_train.robustness.similarity import similarity
from gsr_train.runtime.run_data import RunPlace, load_kg_index, run_place, run_top_k, save_metrics, with_kg_graphs
from gsr_train.text.embeddings import get_embeddings, load_encoder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OpenEndedRecipe:
    """What the stages of an open-ended run read, built once from its checked config by the runner:
    the ``open_ended`` section, the LLM endpoint's options, ``top_k``, the split and the data's name."""

    oe: OpenEndedRun
    llm: dict[str, Any]  # llm: as plain options (the endpoint, its cache, the local server)
    top_k: int
    split: str
    judges_only: bool  # judge_calibration: the LLM is asked only when it verifies facts
    data: str  # the data's name (a dataset, or ``data.kg``)
    kg: str | None  # data.kg
    classic: dict[str, Any] | None  # the classic retrievers' options (the evidence forms)
    place: RunPlace

    @property
    def questions_are_data(self) -> bool:
        """``data.kg`` with a question file: each question's graph is cut from the KG around its entities."""
        return bool(self.kg) and self.oe.questions != "embedded"

    @property
    def data_name(self) -> str:
        return f"{Path(self.oe.questions).name} on {self.kg}" if self.questions_are_data else self.data


def open_ended_recipe(cfg: DictConfig) -> OpenEndedRecipe:
    """The `OpenEndedRecipe` of a checked open-ended run's config."""
    classic = {k: v for k, v in as_dict(cfg.classic).items() if k != "method"} if cfg.get("classic") else None
    kg = cfg.data.get("kg")
    return OpenEndedRecipe(
        built(OpenEndedRun, cfg.open_ended),
        as_dict(cfg.llm),
        run_top_k(cfg),
        str(cfg.get("split", "test")),
        cfg.runner == "judge_calibration",
        str(cfg.data.name),
        str(kg) if kg else None,
        classic,
        run_place(cfg),
    )


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


def _options(r: OpenEndedRecipe) -> JudgeOptions:
    oe, g = r.oe, r.oe.geval
    return JudgeOptions(
        top_k=r.top_k,
        answer_tokens=oe.answer_tokens,
        answer_params=_answer_params(r),
        facts=oe.facts,
        fact_tokens=oe.fact_tokens,
        max_facts=oe.max_facts,
        knowledge=oe.knowledge,
        encoder_candidates=oe.encoder_candidates,
        llm_lines=oe.llm_lines,
        verifiers=tuple(oe.verifiers),
        gamma=oe.gamma,
        geval=GEvalOptions(tuple(g.criteria), g.method, g.samples, g.temperature, g.max_tokens),
    )


def _answer_params(r: OpenEndedRecipe) -> dict:
    """``repetition_penalty`` goes to the project's own server (``llm.autostart``), which takes it (a
    135M model loops without it); OpenAI refuses unknown fields, vLLM takes it via ``llm.extra_params``."""
    penalty = r.oe.repetition_penalty
    return {"repetition_penalty": float(penalty)} if penalty and r.llm.get("autostart") else {}


def _load_questions(r: OpenEndedRecipe, known: set[str] | None) -> tuple[list, dict]:
    """``open_ended.questions`` (the first ``max_questions``; with ``known`` only those about these
    graphs), the skips logged and counted."""
    oe, split_name = r.oe, r.split
    own_graphs = r.questions_are_data  # the data holds the studied questions' graphs: filtered below
    try:
        questions, counts = load_questions(
            oe.questions,
            known_graph_ids=None if own_graphs else known,
            skip_unknown=oe.skip_unknown,
            skip_no_entity=oe.skip_no_entity,
        )
    except ValueError as e:
        raise OpenEndedOptionError(
            f"open_ended.questions={oe.questions} against {r.data_name} [{split_name}]: {e}"
        ) from None
    skipped = {k: int(counts.get(k) or 0) for k in ("skipped_no_entity", "skipped_unknown_graph")}
    rows = len(questions) + sum(skipped.values())
    if oe.max_questions:
        skipped["beyond_max_questions"] = max(0, len(questions) - oe.max_questions)
        questions = questions[: oe.max_questions]
    if own_graphs and known is not None:  # data.skip_invalid left out those whose entities the KG lacks
        kept = [q for q in questions if q.graph_id in known]
        counts["skipped_not_in_kg"] = len(questions) - len(kept)
        questions = kept
    if not questions:
        raise OpenEndedOptionError(f"open_ended.questions={oe.questions}: no question about a graph of {split_name}")
    if known is not None:
        _log_used(oe.questions, len(questions), rows, {**skipped, "not_in_kg": counts.get("skipped_not_in_kg")})
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


def _open_index(cfg: DictConfig, r: OpenEndedRecipe):
    """The graphs asked about: the data's rows, or (`OpenEndedRecipe.questions_are_data`) the
    questions' own rows with the graphs cut from ``data.kg`` (`gsr_train.openended.kg_questions`)."""
    split_name = r.split
    if not r.questions_are_data:
        return load_kg_index(cfg, evaluate=[split_name])
    questions, _ = _load_questions(r, None)
    folder = questions_folder(questions, split_name, r.place.cache_dir, r.oe.entity_prefix or "")
    source = with_kg_graphs(cfg, folder, [split_name])
    return load_kg_index(cfg, source=source, splits=[split_name])  # open-ended: no answer entities to require


def _questions(r: OpenEndedRecipe, index, encoder):
    """The questions under study (the first ``max_questions``) with their graphs and embeddings."""
    graphs = index[r.split]
    where = {g: i for i, g in enumerate(graphs.ids)}
    questions, counts = _load_questions(r, set(where))
    texts = [q.question for q in questions]
    qs = Questions(
        [q.id for q in questions],
        texts,
        [q.graph_id for q in questions],
        graphs.subset([where[q.graph_id] for q in questions]),
        encoder.encode(texts).float(),
    )
    return qs, counts


def _judges(place: RunPlace, llm_cfg: dict, encoder, opts):
    """The stages' LLM endpoint and cache (the run's cache folder unless llm.cache_path says) and
    the encoder verifier."""
    path = llm_cfg.get("cache_path") or place.cache_dir / "llm" / "responses.sqlite"
    cache = ResponseCache(path) if llm_cfg.get("use_cache", True) else None
    verifier = EncoderVerifier(encoder, opts.encoder_candidates) if "encoder" in opts.verifiers else None
    return Judges(llm_cfg, cache, verifier, None)


def _setup(
    cfg: DictConfig, r: OpenEndedRecipe, llm_cfg: dict, forms: list[str], files: dict, needs_llm: bool
) -> _Setup:
    """Everything a run needs, after every option was checked (and the LLM endpoint found listening,
    before the embeddings and the answers). ``files``: the checked results files by label; ``cfg``
    only opens the data (`load_kg_index`)."""
    results = {label: {q["id"]: q for q in read_jsonl(path)} for label, path in files.items()}
    opts = _options(r)
    torch.set_num_threads(r.oe.threads or 1)
    index = _open_index(cfg, r)
    encoder = load_encoder(r.place.encoder)
    qs, counts = _questions(r, index, encoder)
    if needs_llm:
        require_endpoint(llm_cfg)  # nothing listening: one line now, not after every request's retries
    classic = any(f in ("triplets", "paths", "subgraphs") for f in forms)
    emb = get_embeddings(index, r.place.encoder, r.place.cache_dir, splits=[r.split]) if classic else None
    judges = _judges(r.place, llm_cfg, encoder, opts)
    return _Setup(index, r.split, qs, counts, emb, judges, opts, results, r.classic, graph_knowledge(qs, index))


def _calibrate(r: OpenEndedRecipe, s: _Setup) -> dict:
    """The judge calibration on the studied graphs; sets the encoder verifier's threshold; printed."""
    c = r.oe.calibration
    facts = calibration_set(s.qs.split, s.index, c.per_question, c.max_facts, c.seed)
    report = calibrate_judges(facts, s.graphs, s.judges, s.opts)
    if "encoder" in report:
        s.judges.threshold = float(report["encoder"]["threshold"])
    report["table"] = calibration_table(report, str(s.judges.llm.get("model")))
    print(report["table"], flush=True)
    return report


def _run_with(cfg: DictConfig, forms: list[str], body) -> Any:
    """``body(recipe, setup, t0)`` with the LLM endpoint answering (served here when ``llm.autostart``)
    and the response cache closed after it (every answer in it is committed already)."""
    files = check_open_ended(cfg, forms)  # every option, the question file and data.kg: before the LLM server starts
    r = open_ended_recipe(cfg)
    needs_llm = "llm" in r.oe.verifiers or not r.judges_only
    served_here = local_endpoint(r.llm, r.place.cache_dir, r.place.device) if needs_llm else None
    with served_here or contextlib.nullcontext(r.llm) as served:
        t0 = time.perf_counter()
        s = _setup(cfg, r, served, forms, files, needs_llm)
        try:
            return body(r, s, t0)
        finally:
            s.judges.close()


def run_calibration(cfg: DictConfig) -> dict:
    """``+experiment=okgqa_calibration``: each verifier's accuracy and AUC on true / perturbed KG facts."""

    def body(r: OpenEndedRecipe, s: _Setup, t0: float) -> dict:
        report = _calibrate(r, s)
        rows = [_calibration_row(name, report[name], s.split_name) for name in ("encoder", "llm") if name in report]
        details = {"calibration": report, "llm_usage": s.judges.usage, "questions": s.counts}
        details["total_seconds"] = round(time.perf_counter() - t0, 2)
        _write(cfg, r, s, rows, details, ("calibration.md", report["table"]))
        return details

    return _run_with(cfg, ["none"], body)


def _calibration_row(name: str, r: dict, split: str) -> dict:

    keys = ("auc", "accuracy", "accuracy_at_0.5")  # shares (thresholds and counts: metrics.json details)
    return metrics_row(f"verifier-{name}", split, None, {k: r.get(k) for k in keys if k in r}, verifier=name)


def _write(
    cfg: DictConfig, r: OpenEndedRecipe, s: _Setup, rows: list, details: dict, report: tuple[str, str], answers=None
) -> None:
    """metrics.json (`save_metrics`: the one reason ``cfg`` comes here), the markdown ``report``
    (name, text) and (when given) the per-answer rows, each atomically."""
    out, (md_name, md) = r.place.out, report
    if answers is not None:
        write_jsonl(out / f"open_ended_{s.split_name}.jsonl", answers)
    with atomic_write(out / md_name, "w") as f:
        f.write(md + "\n")
    save_metrics(cfg, s.index.key, rows, details, r.data_name)
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

    def body(r: OpenEndedRecipe, s: _Setup, t0: float) -> dict:
        calibration = _calibrate(r, s)
        figures, answers = _judge_all(s, [Condition(f, f, s.qs.split) for f in forms])
        table = conditions_table(figures, f"{r.data_name} [{s.split_name}], {len(s.qs.ids)} questions")
        print(table, flush=True)
        details = _details(s, figures, calibration, t0)
        rows = condition_rows(figures, s.split_name, r.top_k, {f: {"form": f} for f in forms})
        _write(cfg, r, s, rows, details, ("open_ended.md", calibration["table"] + "\n\n" + table), answers)
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

    def body(r: OpenEndedRecipe, s: _Setup, t0: float) -> dict:
        calibration = _calibrate(r, s)
        conditions, labels, similarity = _perturbed_conditions(r, s, forms)
        figures, answers = _judge_all(s, conditions)
        title = f"{r.data_name} [{s.split_name}], {len(s.qs.ids)} questions, seed {r.oe.perturb.seed}"
        table = conditions_table(figures, title, labels)
        print(table, flush=True)
        details = {**_details(s, figures, calibration, t0), "grid": labels, "similarity": similarity}
        rows = condition_rows(figures, s.split_name, r.top_k, labels)
        out = r.place.out
        pngs = [grid_plot(figures, labels, out / f"okgqa_perturbed_{m}.png", m, title) for m in _PLOTTED]
        report = ("okgqa_perturbed.md", calibration["table"] + "\n\n" + table)
        _write(cfg, r, s, rows, details, report, answers)
        print("plots: " + ", ".join(str(p) for p in pngs))
        return details

    return _run_with(cfg, forms, body)


_PLOTTED = ("encoder_mean_support", "hallucination_llm")  # support: the encoder's view before its threshold


def _perturbed_conditions(r: OpenEndedRecipe, s: _Setup, forms: list[str]) -> tuple[list, dict, list]:
    """The grid's conditions (closed book once, each evidence form on the original graphs and on
    every perturbed copy), their labels, and each perturbed copy's similarity to the original."""
    p = r.oe.perturb
    scorer = get_scorer(s.qs.split, len(s.index.relations), p.kge, r.place.cache_dir)
    conditions, labels, sims = [], {}, []
    for form in forms:
        conditions.append(Condition(form, form, s.qs.split))
        labels[form] = {"form": form, "perturbation": "none", "level": 0.0}
    for method in p.methods:
        for level in (float(x) for x in p.levels if float(x) > 0):
            pert = perturb(s.qs.split, method, level, p.seed, scorer=scorer)
            sims.append({"method": method, "level": level, **similarity(s.qs.split, pert.split, scorer).to_dict()})
            for form in forms:
                if form == "none":
                    continue  # the closed book reads no graph
                label = f"{form}@{method}:{level:g}"
                conditions.append(Condition(label, form, pert.split))
                labels[label] = {"form": form, "perturbation": method, "level": level}
    return conditions, labels, sims
