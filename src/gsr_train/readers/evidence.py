"""The evidence a reader run reads: each split's questions and their retrieval results rows.

Where the rows come from (``qa.retrieval``): given results files (``results.<split>``), a
SubgraphRAG checkpoint (``checkpoint``) that retrieves the top ``k`` triples once into the cache
(keyed by checkpoint digest, data, split, K and encoder), any registered retriever (``retriever``
+ ``options``; default ``cosine``), or several of these merged into one prompt (``sources``,
`gsr_train.readers.evidence_merge`). `gather` copies (or writes) each split's rows
into the run folder as ``results_<split>.jsonl`` and says, per split, where they came from.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from gsr_train.arrays import segment_count
from gsr_train.data.errors import PreflightError
from gsr_train.eval.results import write_results
from gsr_train.eval.tail import results_file
from gsr_train.io import atomic_write, file_digest, iter_jsonl, open_text, stable_hash, write_jsonl
from gsr_train.kg.paths import get_supervision
from gsr_train.readers.evidence_merge import Source, merge_rows
from gsr_train.readers.options import EvidenceSource, QARetrieval, QARun
from gsr_train.retrievers import registry as retrievers
from gsr_train.retrievers.interface import ROW_FIELDS, RetrievalInputs
from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever, check_compatible
from gsr_train.runtime.run_data import RunPlace
from gsr_train.text.embeddings import get_embeddings

log = logging.getLogger(__name__)


@dataclass
class Gathered:
    """Per split: the questions (`question_table`), the results rows by question id, and
    where they came from (``evidence``: in words; the file, its rows, what was missing)."""

    questions: dict[str, list[dict]] = field(default_factory=dict)
    results: dict[str, dict[str, dict]] = field(default_factory=dict)
    info: dict[str, dict[str, Any]] = field(default_factory=dict)


Spec = QARetrieval | EvidenceSource  # one source's keys: checkpoint, results, retriever, options, k


def gather(
    qa: QARun,
    top_k: int,
    place: RunPlace,
    index: Any,
    splits: Sequence[str],
    sources: Sequence[EvidenceSource],
    write: bool = True,
) -> Gathered:
    """Each split's questions (the first ``qa.limit.<split>``) and evidence, copied into the run folder
    as ``results_<split>.jsonl`` when ``write`` (global rank 0); merged first when ``sources``
    (checked by `evidence_sources`) names several, each offering its ``top_k`` lines (default: the
    run's ``top_k``)."""
    got = Gathered()
    limit = qa.limit or {}
    for s in splits:
        got.questions[s] = question_table(index, s, place.cache_dir)
        if limit.get(s):
            got.questions[s] = got.questions[s][: int(limit[s])]
        local = results_file(place.out, s)
        if sources:
            got.results[s], got.info[s] = merged_evidence(qa, top_k, place, index, s, sources)
            if write:
                write_jsonl(local, [got.results[s][qid] for qid in index[s].ids if qid in got.results[s]])
        else:
            path = retrieval_file(qa.retrieval, place, index, s)
            if path.resolve() != local.resolve() and write:
                with atomic_write(local, "w") as f, open_text(path) as src:  # compressed or not
                    shutil.copyfileobj(src, f)
            got.results[s], got.info[s] = read_result_rows(path, index[s].ids)
            got.info[s]["evidence"] = evidence_source(qa.retrieval, place, s)
        log.info("evidence for split %s: %s", s, got.info[s]["evidence"])
    return got


# --------------------------------------------------------------------------- questions


def question_table(index, split_name: str, cache: Path | None) -> list[dict]:
    """Per question: id, text, gold answers, answer-entity-in-graph flag, hop count and the names
    of its topic entities."""
    sp = index[split_name]
    in_kg = segment_count(sp.answer_mask, sp.ent_ptr) > 0
    hops = get_supervision(index, split_name, cache).hops.tolist()
    topics = topic_names(index, split_name)
    return [
        {
            "id": sp.ids[i],
            "question": sp.questions[i],
            "answers": list(sp.answers[i]),
            "in_kg": bool(in_kg[i]),
            "hops": int(hops[i]),
            "topics": topics.get(sp.ids[i], []),
        }
        for i in range(len(sp))
    ]


def topic_names(index: Any, split_name: str) -> dict[str, list[str]]:
    """Per question id, the names of its topic entities (what retrieval's answers leave out)."""
    sp = index[split_name]
    per_question = torch.bincount(
        torch.repeat_interleave(torch.arange(len(sp)), sp.ent_ptr.diff())[sp.topic_mask], minlength=len(sp)
    ).tolist()
    names = iter(index.entities.take(sp.entity_ids[sp.topic_mask].numpy()))  # one lookup for the split
    return {qid: [str(next(names)) for _ in range(n)] for qid, n in zip(sp.ids, per_question)}


# --------------------------------------------------------------------------- one source


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


def retrieval_file(ret: Spec, place: RunPlace, index, split_name: str) -> Path:
    """The results file of ``split_name``: configured path, or retrieved once with the checkpoint
    (or the registered retriever, `registered_results_file`)."""
    given = (ret.results or {}).get(split_name)
    if given:
        return Path(str(given))
    if not ret.checkpoint:
        return registered_results_file(ret, place, index, split_name)
    ckpt = Path(ret.checkpoint)
    if not ckpt.is_file():
        raise FileNotFoundError(f"qa.retrieval.checkpoint: {ckpt} not found")
    k = _k(ret)
    key = stable_hash("reader-retrieval", 2, file_digest(ckpt), index.key, split_name, k, place.encoder_key)
    path = place.cache_dir / "reader_retrieval" / f"{split_name}-k{k}-{key}.jsonl"
    if not path.exists():
        t0 = time.perf_counter()
        emb = get_embeddings(index, place.encoder, place.cache_dir, splits=[split_name])
        retriever = SubgraphRAGRetriever.from_checkpoint(ckpt, device=place.device)
        check_compatible(retriever.hparams, emb)
        path.parent.mkdir(parents=True, exist_ok=True)
        retriever.retrieve(index, split_name, emb, path, k=k)
        seconds = time.perf_counter() - t0
        log.info("retrieved top-%d triples of split %s with %s in %.1fs -> %s", k, split_name, ckpt, seconds, path)
    return path


def _k(ret: Spec) -> int:
    """How many triples a source keeps per question (a merged source's ``k`` is filled in by
    `merged_evidence` from ``qa.retrieval.k`` when it leaves it out)."""
    if ret.k is None:
        raise ValueError("an evidence source without k: merged_evidence fills it from qa.retrieval.k")
    return int(ret.k)


def evidence_source(ret: Spec, place: RunPlace, split_name: str) -> str:
    """Where the evidence of ``split_name`` comes from, in words (printed and kept in metrics.json)."""
    given = (ret.results or {}).get(split_name)
    if given:
        return f"results file {given}"
    if ret.checkpoint:
        return f"SubgraphRAG checkpoint {ret.checkpoint} (top {_k(ret)})"
    name = ret.retriever or "cosine"
    note = (
        ""
        if ret.retriever
        else "; no qa.retrieval.checkpoint, results or retriever given: a trained retriever's evidence is better"
    )
    return f"{name} retriever with {place.encoder.get('name')} (top {_k(ret)}{note})"


def registered_results_file(ret: Spec, place: RunPlace, index, split_name: str) -> Path:
    """Evidence from any registered retriever (``qa.retrieval.retriever``, default ``cosine``, with
    ``qa.retrieval.options``): its top ``qa.retrieval.k`` triples, retrieved once into the cache
    (keyed by retriever, options, data, split, K and encoder)."""
    name, options = ret.retriever or "cosine", ret.options or {}
    if name not in retrievers.names():
        raise PreflightError(
            f"qa.retrieval.retriever={name}: not a registered retriever; registered: {retrievers.names()}"
        )
    k = _k(ret)
    key = stable_hash("reader-retriever", 2, name, options, index.key, split_name, k, place.encoder_key)
    path = place.cache_dir / "reader_retrieval" / f"{split_name}-{name}-k{k}-{key}.jsonl"
    if not path.exists():
        t0 = time.perf_counter()
        emb = get_embeddings(index, place.encoder, place.cache_dir, splits=[split_name])
        split = index[split_name]
        inputs = RetrievalInputs(
            index, emb.question[split_name], emb, split, split_name, place.encoder, place.cache_dir, place.device
        )
        scores, extra = retrievers.build(name, options, inputs).score(split)
        path.parent.mkdir(parents=True, exist_ok=True)  # rows keep the retriever's own fields (answers, paths)
        write_results(path, index, split_name, scores, k, extra=(extra or {}).get(ROW_FIELDS))
        seconds = time.perf_counter() - t0
        log.info(
            "retrieved top-%d triples of split %s with the %s retriever in %.1fs -> %s",
            k,
            split_name,
            name,
            seconds,
            path,
        )
    return path


# --------------------------------------------------------------------------- several sources, merged


def evidence_sources(ret: QARetrieval, splits: Sequence[str]) -> list[EvidenceSource]:
    """``qa.retrieval.sources`` checked before any work (for the ``splits`` the run reads): each with
    a distinct label, exactly one of ``checkpoint`` / ``results`` / ``retriever``, and nothing set at
    ``qa.retrieval`` besides; each source's label and ``k`` filled in."""
    given = ret.sources or []
    if not given:
        return []
    clash = [key for key in ("checkpoint", "retriever", "options") if getattr(ret, key)]
    clash += ["results"] if any((ret.results or {}).values()) else []
    if clash:
        raise PreflightError(
            f"qa.retrieval.sources is given, and so is qa.retrieval.{clash[0]}: name every source inside the list"
        )
    sources: list[EvidenceSource] = []
    for i, src in enumerate(given):
        kinds = [key for key in ("checkpoint", "retriever") if getattr(src, key)]
        kinds += ["results"] if any((src.results or {}).values()) else []
        if len(kinds) != 1:
            found = ", ".join(kinds) or "none of them"
            raise PreflightError(
                f"qa.retrieval.sources[{i}]: give exactly one of checkpoint, results or retriever (found {found})"
            )
        label = src.label or src.retriever or kinds[0]
        if label in [s.label for s in sources]:
            raise PreflightError(
                f"qa.retrieval.sources[{i}]: label {label!r} is used twice; set label: to tell them apart"
            )
        _check_source(i, src, list(splits))
        sources.append(replace(src, label=label, k=src.k or ret.k))
    return sources


def _check_source(i: int, src: EvidenceSource, splits: list[str]) -> None:
    """A missing file or an unknown retriever of one source, named before any retrieval runs (a
    source of results files names one for every split the run reads: no silent fallback)."""
    where = f"qa.retrieval.sources[{i}]"
    results = src.results or {}
    for split, path in results.items():
        if path and not Path(str(path)).is_file():
            raise PreflightError(f"{where}.results.{split}: {path} not found")
    lacking = [s for s in splits if any(results.values()) and not results.get(s)]
    if lacking:
        raise PreflightError(f"{where}.results: no file for split {lacking[0]} (the run reads {', '.join(splits)})")
    if src.checkpoint and not Path(src.checkpoint).is_file():
        raise PreflightError(f"{where}.checkpoint: {src.checkpoint} not found")
    if src.retriever and src.retriever not in retrievers.names():
        raise PreflightError(
            f"{where}.retriever={src.retriever}: not a registered retriever; registered: {retrievers.names()}"
        )


def merged_evidence(
    qa: QARun, top_k: int, place: RunPlace, index: Any, split: str, given: Sequence[EvidenceSource]
) -> tuple[dict[str, dict], dict[str, Any]]:
    """Every source's rows of ``split`` (checked by `evidence_sources`), merged
    (`gsr_train.readers.evidence_merge`), and what came from where."""
    ids = index[split].ids
    sources, info = [], {}
    for src in given:
        label = str(src.label)
        rows, info[label] = read_result_rows(retrieval_file(src, place, index, split), ids)
        info[label]["evidence"] = evidence_source(src, place, split)
        sources.append(Source(label, rows, src.top_k or top_k, src.share))
    merged = merge_rows(sources, ids, qa.format, topic_names(index, split))
    shown = ", ".join(f"{s.label} (top {s.top_k}" + (f", <= {s.share} tokens)" if s.share else ")") for s in sources)
    lines = {s.label: sum(row["sources"].get(s.label, 0) for row in merged.values()) for s in sources}
    return merged, {"evidence": f"merged from {shown}", "sources": info, "lines": lines}
