"""Reader experiments: retrieve -> read -> score, the reader trained here when it trains.

``python train.py +experiment=reader_webqsp_mini`` (see ``conf/experiment/reader_*.yaml``) composes:

1. the evidence of the train and eval splits (`gsr_train.readers.evidence`: results files, a
   SubgraphRAG checkpoint, any registered retriever, or several merged), copied into the run folder;
2. the reader ``qa.reading.method`` (`gsr_train.readers.registry`: ``causal-lm``, the default;
   ``prompted``; ``retrieval-answers``; a plugin's name, or ``qa.reading._target_``), made with
   ``qa.reading.options`` (``qa.backend``, the old spelling, still chooses, with one warning);
3. its readings before training (``qa.eval.variants.base``: with and without evidence), its
   training when it trains (the run's Trainer, ``qa.train``) and saving into ``adapter/``, and its
   readings after (``qa.eval.variants.finetuned``); the evidence's own top candidate
   (``retrieval_answers``) is scored next to it;
4. ``predictions_<variant>.jsonl``, ``metrics.json`` (every variant: all / sub / per hop, timings,
   step times) and the reader x evidence x metric table.

Scale-out (as every runner, see `gsr_train.runtime.training`): ``trainer=...`` picks the
Trainer (DDP included: each rank trains on its shard of the same global batch); ``resume=auto``
continues the training from ``<run folder>/checkpoints/last.ckpt``; only global rank 0 scores and
writes files (predictions, ``metrics.json``, the adapter). ``qa.eval_only=<adapter folder>`` skips
training and scores a trained reader. ``gsr-train reader score PREDICTIONS`` re-scores a
predictions file (`gsr_train.commands.reader_score`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from gsr_train.data.errors import PreflightError
from gsr_train.eval.qa import QAReport, comparison_table
from gsr_train.eval.retrieval_answers import ANSWER_VARIANT
from gsr_train.eval.tail import metrics_row
from gsr_train.io import atomic_write, write_jsonl
from gsr_train.llm.client import LLMConfig
from gsr_train.options.check import built
from gsr_train.options.eval_config import find_source
from gsr_train.options.preflight import one_setting, preflight
from gsr_train.readers import evidence, registry
from gsr_train.readers.interface import Reader, ReadingInputs, is_trainable
from gsr_train.readers.options import EvidenceSource, QARun, QATrain, ReaderModel
from gsr_train.readers.retrieval_answers import RetrievalAnswers
from gsr_train.readers.scoring import score_readings
from gsr_train.runtime.run_data import RunPlace, load_kg_index, run_place, run_top_k, save_metrics
from gsr_train.runtime.training import fit_state, is_rank_zero, run_fitting

log = logging.getLogger(__name__)
DEFAULT_READER = "causal-lm"
BY_BACKEND = {"local": "causal-lm", "llm": "prompted"}  # qa.backend, the old spelling of qa.reading.method


@dataclass(frozen=True)
class ReaderRecipe:
    """A reader run's options, built once from its checked config (`reader_recipe`): what every
    stage below the runner reads, in place of the config."""

    qa: QARun
    reader: ReaderModel
    llm: LLMConfig
    top_k: int  # evidence lines per prompt (0: closed book)
    seed: int


def reader_recipe(cfg: DictConfig) -> ReaderRecipe:
    """The `ReaderRecipe` of a reader run's config (a run's own, or one a finished run saved)."""
    return ReaderRecipe(
        built(QARun, cfg.get("qa")),
        built(ReaderModel, cfg.get("reader")),
        built(LLMConfig, cfg.get("llm")),
        run_top_k(cfg),
        int(cfg.seed),
    )


@dataclass
class _ReaderRun:
    """What the stages of one reader run share: the config stays for the run's Trainer, checks and
    metrics file (`gsr_train.runtime`); the stages read the recipe and the place."""

    cfg: DictConfig
    recipe: ReaderRecipe
    place: RunPlace
    t_start: float
    index: Any
    choice: ReaderChoice  # which reader, read once
    training: bool
    sources: list[EvidenceSource] = field(default_factory=list)  # qa.retrieval.sources, checked
    timings: dict[str, float] = field(default_factory=dict)
    evidence: evidence.Gathered = field(default_factory=evidence.Gathered)
    reports: dict[str, QAReport] = field(default_factory=dict)
    answers: QAReport | None = None  # answering with the evidence's top candidate, no reader
    train_info: dict[str, Any] = field(default_factory=dict)
    method: str = ""  # the reader's name in the tables

    @property
    def qa(self) -> QARun:
        return self.recipe.qa

    @property
    def out(self) -> Path:
        return self.place.out

    @property
    def k(self) -> int:
        return self.recipe.top_k

    @property
    def eval_split(self) -> str:
        return self.qa.eval_split

    @property
    def budget(self) -> int:
        return self.qa.max_prompt_tokens

    def rows_of(self, split: str, evidence_kind: str) -> Any:
        """The results rows a variant reads: ``retrieved`` evidence, or none (closed book)."""
        return self.evidence.results[split] if evidence_kind == "retrieved" else None


def run(cfg: DictConfig) -> float:
    """Check the options, gather the evidence, read (training the reader when it trains), report;
    the macro F1 of the best variant."""
    r = _start(cfg)
    reader = _build_reader(r)  # the reader's own options refused before the run folder holds evidence
    _gather_evidence(r)
    _answer_from_retrieval(r)
    if not _read(r, reader):
        return 0.0  # DDP (subprocess launch): rank 0 alone scores and writes
    return _report(r)


@dataclass(frozen=True)
class ReaderChoice:
    """The run's reader, read from its config once: a registered ``name`` or an import path ``target``
    (``qa.reading.method`` / ``qa.reading._target_``), with the options it is made with."""

    name: str | None
    target: str | None
    options: dict[str, Any]


def reader_choice(qa: QARun) -> ReaderChoice:
    """``qa.reading``: the one key choosing the reader. ``qa.backend`` (``llm``: ``prompted``), its old
    spelling, still chooses when ``qa.reading.method`` is left at its default, with one warning."""
    spec = qa.reading
    target = spec._target_ or None
    name = spec.method or DEFAULT_READER
    if qa.backend is not None and target is None:
        if name == DEFAULT_READER:
            name = BY_BACKEND.get(qa.backend, DEFAULT_READER)
        _spelled_now(f"qa.backend={qa.backend} is spelled qa.reading.method={name} now; qa.backend will go")
    return ReaderChoice(None if target else name, target, dict(spec.options))


@functools.cache
def _spelled_now(line: str) -> None:
    """An old spelling's warning, once per process."""
    log.warning(line)


def trains(qa: QARun, factory: Any) -> bool:
    """Does this run train its reader (made by ``factory``; and so read the train split's evidence)?"""
    return not qa.eval_only and bool(qa.train_split) and qa.train.enabled and is_trainable(factory)


def _start(cfg: DictConfig) -> _ReaderRun:
    t_start = time.perf_counter()
    one_setting(cfg, "qa.train.epochs")
    recipe = reader_recipe(cfg)
    qa = recipe.qa
    if qa.threads:
        torch.set_num_threads(qa.threads)
    choice = reader_choice(qa)
    factory = registry.resolve(choice.name, choice.target)  # an unknown reader: one line, before any work
    training = trains(qa, factory)
    splits = [qa.eval_split] + ([str(qa.train_split)] if training else [])
    sources = evidence.evidence_sources(qa.retrieval, splits)
    read = [s for s in (qa.train_split, qa.eval_split) if s]
    preflight(cfg, splits=read, checkpoints={"resume": cfg.get("resume")})  # qa.eval_only may name a hub adapter
    index = load_kg_index(cfg, evaluate=[qa.eval_split])
    return _ReaderRun(cfg, recipe, run_place(cfg), t_start, index, choice, training, sources)


def _gather_evidence(r: _ReaderRun) -> None:
    """Each split's questions and retrieved evidence (copied into the run folder by rank 0)."""
    t0 = time.perf_counter()
    splits = [r.eval_split] + ([str(r.qa.train_split)] if r.training else [])
    r.evidence = evidence.gather(r.qa, r.k, r.place, r.index, splits, r.sources, write=is_rank_zero())
    r.timings["evidence_s"] = time.perf_counter() - t0


def _answer_from_retrieval(r: _ReaderRun) -> None:
    """The evidence's own answer as a row next to the readers (its top candidate entity): what a
    reader adds over answering with the retriever alone."""
    baseline = RetrievalAnswers()
    examples = baseline.prepare(r.evidence.questions[r.eval_split], r.rows_of(r.eval_split, "retrieved"))
    r.answers, _ = score_readings(examples, baseline.answer(examples))
    log.info("answer from retrieval (top candidate): %s", r.answers.flat())


def reading_inputs(
    recipe: ReaderRecipe, trained: str | None, trains: bool, index: Any, cache: Path, device: Any
) -> ReadingInputs:
    """What the reader of a run with ``recipe`` reads besides its options."""
    qa = recipe.qa
    return ReadingInputs(
        format=qa.format,
        k=recipe.top_k,
        max_prompt_tokens=qa.max_prompt_tokens,
        icl=qa.icl,
        seed=recipe.seed,
        train=asdict(qa.train),
        eval=asdict(qa.eval),
        merge=qa.merge,
        model=asdict(recipe.reader),
        llm=asdict(recipe.llm),
        trained=trained,
        trains=trains,
        index=index,
        cache_dir=cache,
        device=device,
    )


def build_reader(choice: ReaderChoice, inputs: ReadingInputs) -> Reader:
    """The reader ``choice`` names, made with its options."""
    return registry.build(choice.name, choice.options, inputs, choice.target)


def reader_of_run(run: str | Path, cache: Path) -> tuple[Reader, ReadingInputs]:
    """The trained reader of a finished reader run (its folder or adapter), on the CPU, to read anew."""
    source = find_source(run)
    if source.method != "reader":
        raise PreflightError(f"{run}: not a reader run (a {source.method} run); give a trained reader_* run")
    recipe = reader_recipe(source.config)
    inputs = reading_inputs(recipe, source.checkpoint, False, None, cache, torch.device("cpu"))
    return build_reader(reader_choice(recipe.qa), inputs), inputs


def _inputs(r: _ReaderRun) -> ReadingInputs:
    return reading_inputs(r.recipe, r.qa.eval_only or None, r.training, r.index, r.place.cache_dir, r.place.device)


def _build_reader(r: _ReaderRun) -> Reader:
    """The run's reader, made with ``qa.reading.options`` (loading a model is timed)."""
    t0 = time.perf_counter()
    reader = build_reader(r.choice, _inputs(r))
    r.timings["load_model_s"] = time.perf_counter() - t0
    r.train_info.update(getattr(reader, "figures", None) or {})
    r.method = str(reader.name)
    return reader


def _read(r: _ReaderRun, reader: Reader) -> bool:
    """The readings before training, the training, the readings after; False on DDP ranks > 0."""
    ev = r.qa.eval
    opened: Any = reader if hasattr(reader, "__enter__") else contextlib.nullcontext()
    with opened:  # a reader that holds something while it reads (a served model)
        variant = str(getattr(reader, "variant", "base"))
        for kind in ev.variants.finetuned if variant == "finetuned" else ev.variants.base:
            _evaluate(r, reader, f"{variant}_{kind}", kind)
        if r.training:
            r.train_info.update(_train(r, reader))
            if not is_rank_zero():
                return False
            for kind in ev.variants.finetuned:
                _evaluate(r, reader, f"finetuned_{kind}", kind)
    r.train_info.update(getattr(reader, "figures", None) or {})
    return True


def _evaluate(r: _ReaderRun, reader: Reader, name: str, kind: str) -> None:
    """Read, score and write ``predictions_<name>.jsonl`` (global rank 0 only: other DDP ranks skip it)."""
    if not is_rank_zero():
        return
    examples = reader.prepare(r.evidence.questions[r.eval_split], r.rows_of(r.eval_split, kind))
    t0 = time.perf_counter()
    readings = reader.answer(examples)
    r.timings[f"generate_{name}_s"] = time.perf_counter() - t0
    r.reports[name], rows = score_readings(examples, readings)
    write_jsonl(r.out / f"predictions_{name}.jsonl", rows)
    log.info("%s\n%s", name, r.reports[name].table())


def _train(r: _ReaderRun, reader: Any) -> dict:
    """Fit the reader with the run's Trainer (``resume=auto``: from the run's last checkpoint); rank 0
    saves it into ``adapter/``; the training figures."""
    fit, tr, split = run_fitting(r.cfg), r.qa.train, str(r.qa.train_split)
    t0 = time.perf_counter()
    batch = fit.batch(tr.batch_size, "qa.train.batch_size")
    parts = reader.training(r.evidence.questions[split], r.evidence.results[split], batch)
    r.timings["prepare_train_s"] = time.perf_counter() - t0
    trainer = fit.trainer(**trainer_options(tr))
    t0 = time.perf_counter()
    ckpt_path = fit.resume
    trainer.fit(parts.module, parts.datamodule, ckpt_path=ckpt_path)
    r.timings["train_s"] = time.perf_counter() - t0
    state = fit_state(trainer, trainer.checkpoint_callback)
    if not is_rank_zero():
        return {"steps": state["global_step"]}
    info = {
        "steps": state["global_step"],
        "epochs": state["epochs_run"],
        "resumed_from": ckpt_path,
        "devices": int(trainer.world_size),
        **reader.save(r.out / "adapter"),
    }
    log.info("reader trained: %s", info)
    return info


def trainer_options(tr: QATrain) -> dict[str, Any]:
    """The Trainer settings of ``qa.train``: epochs, optimiser steps, accumulation, clipping, logging."""
    options: dict[str, Any] = {
        "max_epochs": tr.epochs,
        "accumulate_grad_batches": tr.accumulate,
        "log_every_n_steps": tr.log_every,
    }
    if tr.max_steps:
        options["max_steps"] = tr.max_steps
    if tr.gradient_clip_val:
        options["gradient_clip_val"] = float(tr.gradient_clip_val)
    return options


def _report(r: _ReaderRun) -> float:
    """The QA tables, metrics.json rows (one per variant) and qa_table.txt; the best macro F1."""
    cfg, timings = r.cfg, r.timings
    timings["total_s"] = time.perf_counter() - r.t_start
    figures = _figures(r)
    if is_rank_zero():
        text = _table_text(r, figures["command"])
        save_metrics(cfg, r.index.key, _rows(r, figures), figures)
        with atomic_write(r.out / "qa_table.txt") as f:
            f.write(text)  # printed by the run's closing summary
    if "train_s" in timings:
        median = r.train_info.get("step_s_median")
        per_step = f", {median:.2f}s/step (median)" if median is not None else ""
        print(f"training: {timings['train_s']:.1f}s, {r.train_info.get('steps')} steps{per_step}")
    best = r.reports.get("finetuned_retrieved") or next(iter(r.reports.values()), None)
    return float(best.flat()["macro_f1"]) if best else 0.0


def _figures(r: _ReaderRun) -> dict[str, Any]:
    """What metrics.json keeps besides its rows."""
    return {
        "command": " ".join(sys.argv),
        "format": str(r.qa.format),
        "k": r.k,
        "max_prompt_tokens": r.budget,
        "eval_split": r.eval_split,
        "reader": asdict(r.recipe.reader),
        "qa": asdict(r.qa),
        "retrieval": r.evidence.info,
        "metrics": {name: rep.to_dict() for name, rep in r.reports.items()},
        ANSWER_VARIANT: r.answers.to_dict() if r.answers is not None else None,
        "train": r.train_info,
        "timings": r.timings,
    }


def _table_text(r: _ReaderRun, command: str) -> str:
    """qa_table.txt: the command, the evidence, and the reader x metric tables (all, -sub)."""
    shown = {**r.reports, **({ANSWER_VARIANT: r.answers} if r.answers is not None else {})}
    evidence_text = "; ".join(f"{s}: {info.get('evidence')}" for s, info in r.evidence.info.items())
    return (
        f"command: {command}\nformat={r.qa.format} K={r.k} budget={r.budget} split={r.eval_split}\n"
        f"evidence: {evidence_text}\n\nall questions\n{comparison_table(shown, 'all')}\n\n"
        f"-sub (answer entity in the graph)\n{comparison_table(shown, 'sub')}\n"
    )


def _rows(r: _ReaderRun, figures: dict) -> list[dict]:
    """One metrics.json row per variant, named by who answered."""
    adapter = str(r.out / "adapter") if (r.out / "adapter").is_dir() else (r.qa.eval_only or None)
    rows = []
    for name, rep in figures["metrics"].items():
        view = rep.get("all") or {}
        rows.append(
            metrics_row(
                r.method,
                r.eval_split,
                r.k,
                view.get("metrics") or {},
                adapter if name.startswith("finetuned") else None,
                r.out / f"predictions_{name}.jsonl",
                r.reports[name].question_values() if name in r.reports else None,
                variant=name,
                n=view.get("n"),
            )
        )
    answers = figures.get(ANSWER_VARIANT)
    if answers:  # the evidence answering alone: what each reader row adds over it
        view = answers.get("all") or {}
        rows.append(
            metrics_row(
                "retrieval",
                r.eval_split,
                1,
                view.get("metrics") or {},
                per_question=r.answers.question_values() if r.answers is not None else None,
                variant=ANSWER_VARIANT,
                n=view.get("n"),
            )
        )
    return rows
