"""Hydra runners of the pattern retrievers (``+experiment=simgrag`` / ``+experiment=safe``).

Each run builds the registered ``simgrag`` / ``safe`` retriever (patterns from
``patterns=gold|gsr|llm``, see `gsr_train.patterns.build`), retrieves, writes
``results_<split>.jsonl`` in the project result format (plus the subgraphs and patterns),
prints the recall table and saves ``metrics.json`` with the metrics, the retrieval time per
question and the pattern / search statistics.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from gsr_train.config import as_dict
from gsr_train.eval.labels import load_labelled_triples
from gsr_train.eval.retrieval import retrieval_metrics
from gsr_train.eval.tail import results_file, retrieval_row
from gsr_train.kg.paths import get_supervision
from gsr_train.patterns.retrieve import write_pattern_results
from gsr_train.retrievers.interface import RetrievalInputs
from gsr_train.retrievers.pattern_retriever import PatternRetriever
from gsr_train.retrievers.registry import build
from gsr_train.runtime.device import run_device
from gsr_train.runtime.run_data import cache_dir, label_path, load_kg_index, output_dir, run_encoder, save_metrics
from gsr_train.text.embeddings import get_embeddings

log = logging.getLogger(__name__)


@dataclass
class _PatternRun:
    """What the stages of one pattern-retriever run share."""

    cfg: DictConfig
    method: str
    split: str
    index: Any
    options: dict
    retriever: Any

    @property
    def graphs(self) -> Any:
        return self.index[self.split]

    @property
    def name(self) -> str:
        return f"{self.method}-{self.cfg.patterns.source}"


def _run(cfg: DictConfig, method: str) -> dict[str, Any]:
    """Build the registered ``method`` retriever from the run's config, score the split, write and
    evaluate its results."""
    r = _build(cfg, method)
    t0 = time.perf_counter()
    scores, extra = r.retriever.score(r.graphs)
    total = time.perf_counter() - t0
    out = results_file(output_dir(cfg), r.split)
    _write_results(r, out)
    report = _evaluate(r, scores)
    return _report(r, report, extra, total, out)


def _build(cfg: DictConfig, method: str) -> _PatternRun:
    """The split's index and embeddings, and the ``method`` retriever on them (its options, the
    pattern source and the LLM from the config)."""
    split = cfg.get("split", "test")
    index = load_kg_index(cfg, evaluate=[split])
    enc = run_encoder(cfg)
    emb = get_embeddings(index, enc, cache_dir(cfg), splits=[split])
    graphs = index[split]
    options = as_dict(cfg[method])
    retriever = build(
        method,
        {
            **options,
            "patterns": as_dict(cfg.patterns),
            "llm": as_dict(cfg.llm),
        },
        RetrievalInputs(index, emb.question[split], emb, graphs, split, enc, cache_dir(cfg), run_device(cfg)),
    )
    return _PatternRun(cfg, method, split, index, options, retriever)


def _write_results(r: _PatternRun, out: Path) -> None:
    """The scored run's subgraphs and patterns in the project result format."""
    assert isinstance(r.retriever, PatternRetriever)  # what the registry builds for simgrag / safe
    run = r.retriever.run
    assert run is not None  # set by score()
    write_pattern_results(out, r.index, r.split, run, r.name)


def _evaluate(r: _PatternRun, scores) -> Any:
    """Recall of the scores against the answers, the shortest-path supervision and (when the data
    has them) the labelled triples, by hop count."""
    cfg = r.cfg
    sup = get_supervision(r.index, r.split, cache_dir(cfg))
    labelled = labelled_questions = None
    labels = label_path(cfg, r.split)
    if labels:
        labelled, labelled_questions, _ = load_labelled_triples(labels, r.index, r.split)
    return retrieval_metrics(
        r.graphs,
        scores,
        list(cfg.eval_ks),
        sp_label=sup.triple_label,
        labelled=labelled,
        labelled_questions=labelled_questions,
        hops=sup.hops,
    )


def _report(r: _PatternRun, report, extra: dict, total: float, out: Path) -> dict[str, Any]:
    """The recall table and search summary printed, metrics.json written; the run's figures."""
    cfg, name = r.cfg, r.name
    print(report.table(f"{name} on {cfg.data.name} [{r.split}]", breakdowns=True))
    summary = extra.pop("search")
    print(
        f"{name}: {summary['ms_per_question']:.1f} ms/question, {summary['mean_subgraphs']} subgraphs and "
        f"{summary['mean_triples']} triples per question; {summary['no_pattern']} questions without a pattern"
    )
    result = {
        "experiment": cfg.experiment_name,
        "method": name,
        "data": cfg.data.name,
        "split": r.split,
        "config": r.options,
        "patterns": extra.pop("patterns"),
        "search": summary,
        "total_seconds": round(total, 2),
        "results_path": str(out),
        "metrics": report.to_dict(),
        **extra,
    }
    k = max(int(x) for x in cfg.eval_ks)  # triples: the subgraphs' edges ranked by their first subgraph
    save_metrics(cfg, r.index.key, [retrieval_row(name, report, r.split, k, results=out)], result)
    return result


def run_simgrag(cfg: DictConfig) -> dict[str, Any]:
    return _run(cfg, "simgrag")


def run_safe(cfg: DictConfig) -> dict[str, Any]:
    return _run(cfg, "safe")
