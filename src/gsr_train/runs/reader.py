"""Reader experiments: retrieve -> read -> score, with an optional (Q)LoRA fine-tuning step.

``python train.py +experiment=reader_webqsp_mini`` (see ``conf/experiment/reader_*.yaml``):

1. retrieval results for the train and eval splits: given files (``qa.retrieval.results``)
   or a SubgraphRAG checkpoint (``qa.retrieval.checkpoint``) that retrieves them once into
   the cache (keyed by checkpoint digest + data + split + k) and a copy in the run folder;
2. prompts in ``qa.format`` with the top ``top_k`` evidence lines, cut to ``qa.max_prompt_tokens``;
3. scores the untouched base model (with and without evidence), fine-tunes the LoRA / full
   reader (``reader=...``, ``qa.train``), saves the adapter folder (``adapter/``, peft format;
   ``qa.merge=true`` also writes the merged model), scores the fine-tuned model;
4. writes ``predictions_<variant>.jsonl``, ``metrics.json`` (every variant: all / sub / per hop,
   timings, step times) and prints the reader x evidence x metric table.

Scale-out (as every runner, see :mod:`gsr_train.runtime.training`): ``trainer=...`` picks the
Trainer (DDP included: each rank trains on its shard of the same global batch); ``resume=auto``
continues the fine-tuning from ``<run folder>/checkpoints/last.ckpt`` (written every
``checkpoint_every_n_steps``; the order of the examples is a function of seed and epoch, so a
resumed run trains on exactly the batches an uninterrupted one would); only global rank 0
scores and writes files (predictions, ``metrics.json``, the adapter).

``qa.eval_only=<adapter folder>`` skips training and scores an existing adapter;
``qa.backend=llm`` sends the prompts to the OpenAI-compatible endpoint of ``llm=...`` instead
(prompting-only reader). ``python -m gsr_train.runs.reader score PREDICTIONS --data DIR --split
test`` re-scores a predictions file.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from gsr_train.data.errors import PreflightError
from gsr_train.eval.qa import QAExample, QAReport, comparison_table, qa_metrics
from gsr_train.eval.tail import results_file
from gsr_train.io import atomic_write, file_digest, iter_jsonl, stable_hash, write_json, write_jsonl
from gsr_train.runs.run_data import (
    cache_dir,
    load_kg_index,
    one_setting,
    output_dir,
    preflight,
    resolve_data_dir,
    save_metrics,
)
from gsr_train.runtime.device import encoder_key, run_device
from gsr_train.runtime.training import fit_state, is_rank_zero, make_trainer, rank_batch, resume_path

log = logging.getLogger(__name__)


def _container(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


# --------------------------------------------------------------------------- questions + retrieval


def question_table(index, split_name: str, cache: Path | None) -> list[dict]:
    """Per question: id, text, gold answers, answer-entity-in-graph flag and hop count."""
    from gsr_train.arrays import segment_count
    from gsr_train.kg.paths import get_supervision

    sp = index[split_name]
    in_kg = segment_count(sp.answer_mask, sp.ent_ptr) > 0
    hops = get_supervision(index, split_name, cache).hops.tolist()
    return [
        {
            "id": sp.ids[i],
            "question": sp.questions[i],
            "answers": list(sp.answers[i]),
            "in_kg": bool(in_kg[i]),
            "hops": int(hops[i]),
        }
        for i in range(len(sp))
    ]


def read_result_rows(path: str | Path, ids: Sequence[str]) -> tuple[dict[str, dict], dict]:
    """Results rows by id (raw, strings); unknown ids are an error, missing ones count as empty."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: retrieval results file not found")
    wanted = set(ids)
    rows: dict[str, dict] = {}
    for lineno, rec in iter_jsonl(path):
        if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
            raise ValueError(f"{path}: line {lineno}: expected an object with a string 'id'")
        if rec["id"] not in wanted:
            raise ValueError(f"{path}: line {lineno}: id {rec['id']!r} is not in the split")
        if not isinstance(rec.get("triples", []), list):
            raise ValueError(f"{path}: line {lineno} (id {rec['id']!r}): 'triples' must be a list")
        rows[rec["id"]] = rec
    missing = len(wanted) - len(rows)
    if missing:
        log.warning("%s: %d of %d questions missing; they get no evidence", path, missing, len(wanted))
    return rows, {"path": str(path), "rows": len(rows), "missing": missing}


def retrieval_file(cfg: DictConfig, index, split_name: str) -> Path:
    """The results file of ``split_name``: configured path, or retrieved once with the checkpoint."""
    ret = cfg.qa.retrieval
    given = (ret.get("results") or {}).get(split_name)
    if given:
        return Path(str(given))
    ckpt = ret.get("checkpoint")
    if not ckpt:
        return registered_results_file(cfg, index, split_name)
    ckpt = Path(str(ckpt))
    if not ckpt.is_file():
        raise FileNotFoundError(f"qa.retrieval.checkpoint: {ckpt} not found")
    k = int(ret.k)
    key = stable_hash("reader-retrieval", 1, file_digest(ckpt), resolve_data_dir(cfg), split_name, k, encoder_key(cfg))
    path = cache_dir(cfg) / "reader_retrieval" / f"{split_name}-k{k}-{key}.jsonl"
    if not path.exists():
        from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever, check_compatible
        from gsr_train.text.embeddings import get_embeddings

        t0 = time.perf_counter()
        emb = get_embeddings(index, _container(cfg.encoder), cache_dir(cfg), splits=[split_name])
        retriever = SubgraphRAGRetriever.from_checkpoint(ckpt, device=run_device(cfg))
        check_compatible(retriever.hparams, emb)
        path.parent.mkdir(parents=True, exist_ok=True)
        retriever.retrieve(index, split_name, emb, path, k=k)
        log.info(
            "retrieved top-%d triples of split %s with %s in %.1fs -> %s",
            k,
            split_name,
            ckpt,
            time.perf_counter() - t0,
            path,
        )
    return path


def evidence_source(cfg: DictConfig, split_name: str) -> str:
    """Where the evidence of ``split_name`` comes from, in words (printed and kept in metrics.json)."""
    ret = cfg.qa.retrieval
    given = (ret.get("results") or {}).get(split_name)
    if given:
        return f"results file {given}"
    if ret.get("checkpoint"):
        return f"SubgraphRAG checkpoint {ret.checkpoint} (top {int(ret.k)})"
    name = str(ret.get("retriever") or "cosine")
    note = (
        ""
        if ret.get("retriever")
        else "; no qa.retrieval.checkpoint, results or retriever given: a trained retriever's evidence is better"
    )
    return f"{name} retriever with {cfg.encoder.name} (top {int(ret.k)}{note})"


def registered_results_file(cfg: DictConfig, index, split_name: str) -> Path:
    """Evidence from any registered retriever (``qa.retrieval.retriever``, default ``cosine``, with
    ``qa.retrieval.options``): its top ``qa.retrieval.k`` triples, retrieved once into the cache
    (keyed by retriever, options, data, split, K and encoder)."""
    from gsr_train.retrievers.registry import names

    ret = cfg.qa.retrieval
    name, options = str(ret.get("retriever") or "cosine"), _container(ret.get("options")) or {}
    if name not in names():
        raise PreflightError(f"qa.retrieval.retriever={name}: not a registered retriever; registered: {names()}")
    k = int(ret.k)
    key = stable_hash("reader-retriever", 2, name, options, index.key, split_name, k, encoder_key(cfg))
    path = cache_dir(cfg) / "reader_retrieval" / f"{split_name}-{name}-k{k}-{key}.jsonl"
    if not path.exists():
        from gsr_train.eval.results import write_results
        from gsr_train.retrievers.interface import ROW_FIELDS, RetrievalInputs
        from gsr_train.retrievers.registry import build
        from gsr_train.text.embeddings import get_embeddings

        t0 = time.perf_counter()
        emb = get_embeddings(index, _container(cfg.encoder), cache_dir(cfg), splits=[split_name])
        split = index[split_name]
        retriever = build(
            name,
            options,
            RetrievalInputs(
                index,
                emb.question[split_name],
                emb,
                split,
                split_name,
                _container(cfg.encoder),
                cache_dir(cfg),
                run_device(cfg),
            ),
        )
        scores, extra = retriever.score(split)
        path.parent.mkdir(parents=True, exist_ok=True)  # rows keep the retriever's own fields (answers, paths)
        write_results(path, index, split_name, scores, k, extra=(extra or {}).get(ROW_FIELDS))
        log.info(
            "retrieved top-%d triples of split %s with the %s retriever in %.1fs -> %s",
            k,
            split_name,
            name,
            time.perf_counter() - t0,
            path,
        )
    return path


# --------------------------------------------------------------------------- scoring


def score_responses(examples, responses: Sequence[str], fmt: str) -> tuple[QAReport, list[dict]]:
    """Parse every response, score it, and the prediction rows to write."""
    from gsr_train.readers.prompts import parse_response

    parsed = [parse_response(text, fmt) for text in responses]
    qa = [
        QAExample(ex.id, pred, ex.answers, text, ex.in_kg, ex.hops, ex.entities)
        for ex, pred, text in zip(examples, parsed, responses)
    ]
    report = qa_metrics(qa)
    rows = [
        {
            "id": ex.id,
            "question": ex.question,
            "prediction": pred,
            "response": text,
            "answers": ex.answers,
            "in_kg": ex.in_kg,
            "hops": ex.hops,
            "evidence_shown": ex.evidence_shown,
            "evidence_total": ex.evidence_total,
            "entities": ex.entities,
            **({"evidence_sources": ex.sources} if ex.sources else {}),
        }
        for ex, pred, text in zip(examples, parsed, responses)
    ]
    return report, rows


def _evaluate(name: str, generate, examples, fmt: str, out: Path, reports: dict, timings: dict) -> None:
    """Generate, score and write ``predictions_<name>.jsonl`` (global rank 0 only: other DDP ranks skip it)."""
    if not is_rank_zero():
        return
    t0 = time.perf_counter()
    responses = generate(examples)
    timings[f"generate_{name}_s"] = time.perf_counter() - t0
    report, rows = score_responses(examples, responses, fmt)
    write_jsonl(out / f"predictions_{name}.jsonl", rows)
    reports[name] = report
    log.info("%s\n%s", name, report.table())


# --------------------------------------------------------------------------- runner


@dataclass
class _ReaderRun:
    """What the stages of one reader run share."""

    cfg: DictConfig
    t_start: float
    index: Any
    training: bool
    sources: list[dict[str, Any]] = field(default_factory=list)  # qa.retrieval.sources, checked
    timings: dict[str, float] = field(default_factory=dict)
    questions: dict[str, Any] = field(default_factory=dict)
    results: dict[str, dict] = field(default_factory=dict)
    retrieval_info: dict[str, Any] = field(default_factory=dict)
    reports: dict[str, QAReport] = field(default_factory=dict)
    answers: QAReport | None = None  # answering with the evidence's top candidate, no reader
    train_info: dict[str, Any] = field(default_factory=dict)

    @property
    def qa(self) -> Any:
        return self.cfg.qa

    @property
    def out(self) -> Path:
        return output_dir(self.cfg)

    @property
    def fmt(self) -> str:
        return str(self.qa.format)

    @property
    def k(self) -> int:
        return int(self.cfg.top_k)

    @property
    def eval_split(self) -> str:
        return str(self.qa.eval_split)

    @property
    def budget(self) -> int | None:
        return int(self.qa.max_prompt_tokens) if self.qa.get("max_prompt_tokens") else None


def run(cfg: DictConfig) -> float:
    """Check the options, gather the evidence, read (prompted LLM, or a local model trained here or
    loaded), report; the macro F1 of the best variant."""
    r = _start(cfg)
    _gather_evidence(r)
    _answer_from_retrieval(r)
    if str(r.qa.get("backend", "local")) == "llm":
        _read_with_llm(r)
    elif not _read_locally(r):
        return 0.0  # DDP (subprocess launch): rank 0 alone scores and writes
    return _report(r)


def _start(cfg: DictConfig) -> _ReaderRun:
    t_start = time.perf_counter()
    one_setting(cfg, "qa.train.epochs")
    qa = cfg.qa
    if qa.get("threads"):
        torch.set_num_threads(int(qa.threads))
    sources = evidence_sources(cfg)
    preflight(
        cfg, splits=[qa.get("train_split"), str(qa.eval_split)], checkpoints={"resume": cfg.get("resume")}
    )  # qa.eval_only may name a hub adapter
    index = load_kg_index(cfg, evaluate=[str(qa.eval_split)])
    return _ReaderRun(cfg, t_start, index, trains(cfg), sources)


def trains(cfg: DictConfig) -> bool:
    """Does this run fine-tune a local reader (and so read the train split's evidence)?"""
    qa = cfg.qa
    return (
        str(qa.get("backend", "local")) == "local"
        and not qa.get("eval_only")
        and bool(qa.get("train_split"))
        and bool(qa.train.get("enabled", True))
    )


def _gather_evidence(r: _ReaderRun) -> None:
    """Each split's questions and retrieved evidence (copied into the run folder; merged there
    first when ``qa.retrieval.sources`` names several)."""
    t0 = time.perf_counter()
    cfg, index = r.cfg, r.index
    splits = [r.eval_split] + ([str(r.qa.train_split)] if r.training else [])
    r.questions = {s: question_table(index, s, cache_dir(cfg)) for s in splits}
    limit = r.qa.get("limit") or {}
    for s in splits:
        if limit.get(s):
            r.questions[s] = r.questions[s][: int(limit[s])]
        local = results_file(r.out, s)
        if r.sources:
            r.results[s], r.retrieval_info[s] = _merged_evidence(r, s)
            if is_rank_zero():
                write_jsonl(local, [r.results[s][qid] for qid in index[s].ids if qid in r.results[s]])
        else:
            path = retrieval_file(cfg, index, s)
            if path.resolve() != local.resolve() and is_rank_zero():
                with atomic_write(local, "wb") as f, open(path, "rb") as src:
                    shutil.copyfileobj(src, f)
            r.results[s], r.retrieval_info[s] = read_result_rows(path, index[s].ids)
            r.retrieval_info[s]["evidence"] = evidence_source(cfg, s)
        log.info("evidence for split %s: %s", s, r.retrieval_info[s]["evidence"])
    r.timings["evidence_s"] = time.perf_counter() - t0


def evidence_sources(cfg: DictConfig) -> list[dict[str, Any]]:
    """``qa.retrieval.sources`` checked before any work: each with a distinct label, exactly one
    of ``checkpoint`` / ``results`` / ``retriever``, and nothing set at ``qa.retrieval`` besides."""
    ret = cfg.qa.retrieval
    given = _container(ret.get("sources")) or []
    if not given:
        return []
    clash = [key for key in ("checkpoint", "retriever", "options") if ret.get(key)]
    clash += ["results"] if any((ret.get("results") or {}).values()) else []
    if clash:
        raise PreflightError(
            f"qa.retrieval.sources is given, and so is qa.retrieval.{clash[0]}: name every source inside the list"
        )
    sources, labels = [], []
    for i, src in enumerate(given):
        kinds = [key for key in ("checkpoint", "retriever") if src.get(key)]
        kinds += ["results"] if any((src.get("results") or {}).values()) else []
        if len(kinds) != 1:
            found = ", ".join(kinds) or "none of them"
            raise PreflightError(
                f"qa.retrieval.sources[{i}]: give exactly one of checkpoint, results or retriever (found {found})"
            )
        label = str(src.get("label") or src.get("retriever") or kinds[0])
        if label in labels:
            raise PreflightError(
                f"qa.retrieval.sources[{i}]: label {label!r} is used twice; set label: to tell them apart"
            )
        labels.append(label)
        _check_source(i, src, [str(cfg.qa.eval_split)] + ([str(cfg.qa.train_split)] if trains(cfg) else []))
        sources.append({**src, "label": label})
    return sources


def _check_source(i: int, src: dict[str, Any], splits: list[str]) -> None:
    """A missing file or an unknown retriever of one source, named before any retrieval runs (a
    source of results files names one for every split the run reads: no silent fallback)."""
    from gsr_train.retrievers.registry import names

    where = f"qa.retrieval.sources[{i}]"
    results = src.get("results") or {}
    for split, path in results.items():
        if path and not Path(str(path)).is_file():
            raise PreflightError(f"{where}.results.{split}: {path} not found")
    lacking = [s for s in splits if any(results.values()) and not results.get(s)]
    if lacking:
        raise PreflightError(f"{where}.results: no file for split {lacking[0]} (the run reads {', '.join(splits)})")
    if src.get("checkpoint") and not Path(str(src["checkpoint"])).is_file():
        raise PreflightError(f"{where}.checkpoint: {src['checkpoint']} not found")
    if src.get("retriever") and str(src["retriever"]) not in names():
        raise PreflightError(f"{where}.retriever={src['retriever']}: not a registered retriever; registered: {names()}")


def _source_view(cfg: DictConfig, src: dict[str, Any]) -> DictConfig:
    """``cfg`` with ``qa.retrieval`` holding one source's keys (what the single-source steps read)."""
    keys: dict[str, Any] = {"checkpoint": None, "retriever": None, "options": None, "results": {}, "sources": None}
    view = {key: src.get(key, default) for key, default in keys.items()}
    view["k"] = int(src.get("k") or cfg.qa.retrieval.k)
    plain = OmegaConf.to_container(cfg, resolve=False)  # interpolations resolve in the copy as in cfg
    assert isinstance(plain, dict)
    plain["qa"]["retrieval"] = view
    return OmegaConf.create(plain)


def _merged_evidence(r: _ReaderRun, split: str) -> tuple[dict[str, dict], dict[str, Any]]:
    """Every source's rows of ``split``, merged (``readers.evidence_merge``), and what came from where."""
    from gsr_train.readers.evidence_merge import Source, merge_rows

    ids = r.index[split].ids
    sources, info = [], {}
    for src in r.sources:
        view = _source_view(r.cfg, src)
        rows, info[src["label"]] = read_result_rows(retrieval_file(view, r.index, split), ids)
        info[src["label"]]["evidence"] = evidence_source(view, split)
        top_k = int(src.get("top_k") or r.k)
        share = int(src["share"]) if src.get("share") else None
        sources.append(Source(src["label"], rows, top_k, share))
    merged = merge_rows(sources, ids, r.fmt, topic_names(r.index, split))
    shown = ", ".join(f"{s.label} (top {s.top_k}" + (f", <= {s.share} tokens)" if s.share else ")") for s in sources)
    lines = {s.label: sum(row["sources"].get(s.label, 0) for row in merged.values()) for s in sources}
    return merged, {"evidence": f"merged from {shown}", "sources": info, "lines": lines}


def topic_names(index: Any, split_name: str) -> dict[str, list[str]]:
    """Per question id, the names of its topic entities (what retrieval's answers leave out)."""
    sp = index[split_name]
    per_question = torch.bincount(
        torch.repeat_interleave(torch.arange(len(sp)), sp.ent_ptr.diff())[sp.topic_mask], minlength=len(sp)
    ).tolist()
    names = iter(index.entities.take(sp.entity_ids[sp.topic_mask].numpy()))  # one lookup for the split
    return {qid: [str(next(names)) for _ in range(n)] for qid, n in zip(sp.ids, per_question)}


def _answer_from_retrieval(r: _ReaderRun) -> None:
    """The evidence's own answer as a row next to the readers (its top candidate entity): what a
    reader adds over answering with the retriever alone."""
    from gsr_train.eval.retrieval_answers import answers_report

    split = r.eval_split
    r.answers = answers_report(r.questions[split], r.results[split], topic_names(r.index, split), n=1)
    log.info("answer from retrieval (top candidate): %s", r.answers.flat())


def _examples(r: _ReaderRun, evidence: str, tokenizer: Any = None, budget: int | None = None):
    from gsr_train.readers.prompts import build_examples

    retrieved = r.results[r.eval_split] if evidence == "retrieved" else None
    return build_examples(r.questions[r.eval_split], retrieved, r.fmt, r.k, tokenizer, budget, bool(r.qa.icl))


def _read_with_llm(r: _ReaderRun) -> None:
    """A prompted LLM behind an OpenAI-compatible endpoint (served here when asked) answers."""
    from gsr_train.llm.local_model import local_endpoint
    from gsr_train.readers.generate import generate_remote

    ev = r.qa.eval
    usage: dict = {}
    with local_endpoint(_container(r.cfg.llm), cache_dir(r.cfg), run_device(r.cfg)) as llm_cfg:

        def gen_remote(exs):
            texts, u = generate_remote(llm_cfg, exs, int(ev.max_new_tokens))
            usage.update(u)
            return texts

        for evidence in ev.variants.base:
            _evaluate(f"prompting_{evidence}", gen_remote, _examples(r, evidence), r.fmt, r.out, r.reports, r.timings)
    r.train_info["llm_usage"] = usage


def _read_locally(r: _ReaderRun) -> bool:
    """The local reader: base variants, training, fine-tuned variants; False on DDP ranks > 0."""
    from gsr_train.readers.generate import generate_local
    from gsr_train.readers.model import count_parameters, load_reader

    cfg, qa, rcfg, ev = r.cfg, r.qa, r.cfg.reader, r.qa.eval
    t0 = time.perf_counter()
    model, tokenizer, model_path = load_reader(
        rcfg.model,
        str(rcfg.precision),
        str(rcfg.compute_dtype),
        str(rcfg.adapter),
        _container(rcfg.lora),
        bool(rcfg.gradient_checkpointing) and r.training,
        adapter_path=qa.get("eval_only") or None,
        trainable=r.training,
        cache_dir=cache_dir(cfg),
        device_map=_container(rcfg.get("device_map")),
        device=run_device(cfg),
    )
    r.timings["load_model_s"] = time.perf_counter() - t0
    r.train_info["parameters"] = count_parameters(model)
    r.train_info["model_path"] = model_path

    def gen_local(exs):
        return generate_local(model, tokenizer, exs, int(ev.batch_size), int(ev.max_new_tokens))

    def read(name: str, evidence: str) -> None:
        _evaluate(name, gen_local, _examples(r, evidence, tokenizer, r.budget), r.fmt, r.out, r.reports, r.timings)

    label = "finetuned" if qa.get("eval_only") else "base"  # an adapter given, or the untouched base model
    for evidence in ev.variants.finetuned if qa.get("eval_only") else ev.variants.base:
        read(f"{label}_{evidence}", evidence)
    if r.training:
        split = str(qa.train_split)
        r.train_info.update(
            train_reader(
                cfg, model, tokenizer, r.questions[split], r.results[split], r.fmt, r.k, r.budget, r.out, r.timings
            )
        )
        if not is_rank_zero():
            return False
        for evidence in ev.variants.finetuned:
            read(f"finetuned_{evidence}", evidence)
    return True


def _report(r: _ReaderRun) -> float:
    """The QA tables, metrics.json rows (one per variant) and qa_table.txt; the best macro F1."""
    from gsr_train.eval.retrieval_answers import ANSWER_VARIANT

    cfg, qa, out, timings = r.cfg, r.qa, r.out, r.timings
    timings["total_s"] = time.perf_counter() - r.t_start
    shown = {**r.reports, **({ANSWER_VARIANT: r.answers} if r.answers is not None else {})}
    table = comparison_table(shown, "all")
    table_sub = comparison_table(shown, "sub")
    command = " ".join(sys.argv)
    figures = {
        "command": command,
        "format": r.fmt,
        "k": r.k,
        "max_prompt_tokens": r.budget,
        "eval_split": r.eval_split,
        "reader": _container(cfg.reader),
        "qa": _container(qa),
        "retrieval": r.retrieval_info,
        "metrics": {name: rep.to_dict() for name, rep in r.reports.items()},
        ANSWER_VARIANT: r.answers.to_dict() if r.answers is not None else None,
        "train": r.train_info,
        "timings": timings,
    }
    evidence = "; ".join(f"{s}: {info.get('evidence')}" for s, info in r.retrieval_info.items())
    text = (
        f"command: {command}\nformat={r.fmt} K={r.k} budget={r.budget} split={r.eval_split}\nevidence: {evidence}\n\n"
        f"all questions\n{table}\n\n-sub (answer entity in the graph)\n{table_sub}\n"
    )
    if is_rank_zero():
        save_metrics(cfg, r.index.key, _rows(r, figures), figures)
        with atomic_write(out / "qa_table.txt") as f:
            f.write(text)
        print(text)
    if "train_s" in timings:
        print(
            f"training: {timings['train_s']:.1f}s, {r.train_info.get('steps')} steps, "
            f"{r.train_info.get('step_s_median', float('nan')):.2f}s/step (median)"
        )
    best = r.reports.get("finetuned_retrieved") or next(iter(r.reports.values()), None)
    return float(best.flat()["macro_f1"]) if best else 0.0


def _rows(r: _ReaderRun, figures: dict) -> list[dict]:
    """One metrics.json row per variant, named by who answered."""
    from gsr_train.eval.retrieval_answers import ANSWER_VARIANT
    from gsr_train.eval.tail import metrics_row

    qa, out = r.qa, r.out
    adapter = str(out / "adapter") if (out / "adapter").is_dir() else (qa.get("eval_only") or None)
    reader_name = str(r.cfg.llm.model) if str(qa.backend) == "llm" else str(r.cfg.reader.name)
    rows = []
    for name, rep in figures["metrics"].items():
        view = rep.get("all") or {}
        rows.append(
            metrics_row(
                reader_name,
                r.eval_split,
                r.k,
                view.get("metrics") or {},
                adapter if name.startswith("finetuned") else None,
                out / f"predictions_{name}.jsonl",
                variant=name,
                n=view.get("n"),
            )
        )
    answers = figures.get(ANSWER_VARIANT)
    if answers:  # the evidence answering alone: what each reader row adds over it
        view = answers.get("all") or {}
        rows.append(
            metrics_row(
                "retrieval", r.eval_split, 1, view.get("metrics") or {}, variant=ANSWER_VARIANT, n=view.get("n")
            )
        )
    return rows


@dataclass
class _ReaderTraining:
    """What the stages of the reader's fine-tuning share."""

    cfg: DictConfig
    model: Any
    tokenizer: Any
    fmt: str
    k: int
    budget: int | None
    out: Path
    timings: dict

    @property
    def tr(self) -> Any:
        return self.cfg.qa.train


def train_reader(
    cfg: DictConfig,
    model,
    tokenizer,
    questions,
    results,
    fmt: str,
    k: int,
    budget: int | None,
    out: Path,
    timings: dict,
) -> dict:
    """Fine-tune the reader on the train split's retrieved evidence; save the adapter folder."""
    t = _ReaderTraining(cfg, model, tokenizer, fmt, k, budget, out, timings)
    t0 = time.perf_counter()
    dataset = _train_dataset(t, questions, results)
    timings["prepare_train_s"] = time.perf_counter() - t0
    module, trainer, ckpt_path = _fit_reader(t, dataset)
    state = fit_state(trainer, trainer.checkpoint_callback)
    if not is_rank_zero():
        return {"steps": state["global_step"]}
    return _save_reader(t, module, trainer, state, dataset, ckpt_path)


def _train_dataset(t: _ReaderTraining, questions, results):
    """The training prompts with their evidence (plus ``qa.train.no_evidence_fraction`` closed-book
    copies), those without answers left out unless ``qa.train.require_answers=false``."""
    import numpy as np

    from gsr_train.readers.data import ReaderDataset
    from gsr_train.readers.prompts import build_examples

    cfg, tr, tokenizer = t.cfg, t.tr, t.tokenizer
    examples = build_examples(questions, results, t.fmt, t.k, tokenizer, t.budget, bool(cfg.qa.icl))
    if tr.get("no_evidence_fraction"):
        # a share of closed-book copies so the reader also answers without evidence
        rng = np.random.default_rng(int(cfg.seed))
        pick = rng.random(len(questions)) < float(tr.no_evidence_fraction)
        examples += build_examples(
            [q for q, p in zip(questions, pick) if p], None, t.fmt, 0, tokenizer, t.budget, bool(cfg.qa.icl)
        )
    if tr.get("require_answers", True):
        examples = [ex for ex in examples if ex.answers]
    return ReaderDataset(tokenizer, examples, int(tr.max_length))


def _fit_reader(t: _ReaderTraining, dataset) -> tuple[Any, Any, str | None]:
    """Train (``resume=auto``: from the run's last checkpoint); the module, the trainer and the
    checkpoint resumed from."""
    from gsr_train.readers.data import ReaderDataModule
    from gsr_train.readers.model import ReaderModule

    cfg, tr = t.cfg, t.tr
    module = ReaderModule(
        t.model,
        lr=float(tr.lr),
        weight_decay=float(tr.weight_decay),
        warmup_ratio=float(tr.warmup_ratio),
        log_every=int(tr.get("log_every", 10)),
    )
    dm = ReaderDataModule(
        dataset, t.tokenizer.pad_token_id, rank_batch(cfg, int(tr.batch_size), "qa.train.batch_size"), int(cfg.seed)
    )
    overrides: dict[str, Any] = {
        "max_epochs": int(tr.epochs),
        "accumulate_grad_batches": int(tr.get("accumulate", 1)),
        "log_every_n_steps": int(tr.get("log_every", 10)),
    }
    if tr.get("max_steps"):
        overrides["max_steps"] = int(tr.max_steps)
    if tr.get("gradient_clip_val"):
        overrides["gradient_clip_val"] = float(tr.gradient_clip_val)
    trainer = make_trainer(cfg, **overrides)
    t.model.train()
    t0 = time.perf_counter()
    ckpt_path = resume_path(cfg)
    trainer.fit(module, dm, ckpt_path=ckpt_path)
    t.timings["train_s"] = time.perf_counter() - t0
    t.model.eval()
    return module, trainer, ckpt_path


def _save_reader(t: _ReaderTraining, module, trainer, state: dict, dataset, ckpt_path: str | None) -> dict:
    """The adapter folder (and, ``qa.merge`` with LoRA, the merged model) written; the training figures."""
    import numpy as np

    from gsr_train.memory import peak_rss_mb
    from gsr_train.readers.model import merge_and_export, save_adapter

    cfg, out = t.cfg, t.out
    steps = np.asarray(module.step_seconds[1:] or module.step_seconds or [float("nan")])
    adapter_dir = out / "adapter"
    meta = {
        "base_model": str(cfg.reader.model),
        "precision": str(cfg.reader.precision),
        "adapter": str(cfg.reader.adapter),
        "format": t.fmt,
        "k": t.k,
        "max_prompt_tokens": t.budget,
    }
    save_adapter(t.model, t.tokenizer, adapter_dir, meta)
    info = {
        "steps": state["global_step"],
        "epochs": state["epochs_run"],
        "resumed_from": ckpt_path,
        "devices": int(trainer.world_size),
        "step_s_median": float(np.median(steps)),
        "step_s_mean": float(np.mean(steps)),
        "loss_first10": float(np.mean(module.losses[:10])) if module.losses else None,
        "loss_last10": float(np.mean(module.losses[-10:])) if module.losses else None,
        "data": dataset.token_stats(),
        "adapter_dir": str(adapter_dir),
        "rss_mb_per_step": module.step_rss_mb,
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }
    if cfg.qa.get("merge") and str(cfg.reader.adapter) == "lora":
        info["merged_dir"] = str(
            merge_and_export(str(cfg.reader.model), adapter_dir, out / "merged", cache_dir=cache_dir(cfg))
        )
    log.info("reader trained: %s", info)
    return info


# --------------------------------------------------------------------------- re-scoring CLI


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gsr_train.runs.reader score PREDICTIONS.jsonl [--out metrics.json]``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m gsr_train.runs.reader")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score", help="re-score a predictions_<variant>.jsonl file of a reader run")
    s.add_argument("predictions")
    s.add_argument("--out", default=None)
    args = p.parse_args(argv)
    rows = []
    for lineno, rec in iter_jsonl(args.predictions):
        if not isinstance(rec, dict) or "prediction" not in rec or "answers" not in rec:
            raise SystemExit(f"{args.predictions}: line {lineno}: needs 'prediction' and 'answers'")
        rows.append(
            QAExample(
                rec["id"],
                rec["prediction"],
                rec["answers"],
                rec.get("response", ""),
                bool(rec.get("in_kg", True)),
                int(rec.get("hops", -1)),
                rec.get("entities") or (),
            )
        )
    report = qa_metrics(rows)
    print(report.table(args.predictions))
    if args.out:
        write_json(args.out, report.to_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
