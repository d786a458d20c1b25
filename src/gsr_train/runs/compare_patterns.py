"""One table for pattern retrievers and triple retrievers on the same split and metrics (the work of
``gsr-train compare-patterns``, `gsr_train.commands.compare_patterns`).

    gsr-train compare-patterns --data ../shared/data/webqsp_mini --split test \
        --gsr-results RUN/results_test.jsonl --gsr-metrics RUN/metrics.json \
        --subgraphrag-results SG/results_test.jsonl --subgraphrag-ckpt SG/checkpoints/best.ckpt \
        --out outputs/patterns_compare

Runs SimGRAG and SAFE with GSR-chain patterns (from ``--gsr-results``) and gold patterns
(the shortest-path chains of the weak supervision, an oracle), runs the cosine baseline,
reads SubgraphRAG and GSR from their results files, and reports answer recall at K (the
retrieved triples in rank order; a subgraph retriever returns fewer than K triples when its
subgraphs hold fewer, shown in the "triples" column) and retrieval time per question:
measured here for SimGRAG / SAFE (cost tables + search; SAFE also its schema join; the
one-off schema build is reported separately), cosine (whole split scored at once) and
SubgraphRAG (re-scored from ``--subgraphrag-ckpt`` when given); GSR's is its decoding time
from ``--gsr-metrics`` (beam search on the machine that ran it). Writes
``comparison.md`` / ``comparison.json`` and the SimGRAG / SAFE result files into ``--out``.
``--data synthetic`` uses the embedded benchmark (generated into the cache if needed).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gsr_train.arrays import segment_sum
from gsr_train.data.synthetic import ensure_synthetic
from gsr_train.eval.evaluate import index_splits
from gsr_train.eval.intervals import format_cell
from gsr_train.eval.markdown import markdown_table
from gsr_train.eval.results import MatchStats, read_results
from gsr_train.eval.retrieval import retrieval_metrics
from gsr_train.eval.schema import RECALL_KS
from gsr_train.io import atomic_write, write_json
from gsr_train.kg.index import default_cache_dir, get_index
from gsr_train.kg.paths import get_supervision
from gsr_train.patterns.retrieve import subgraph_scores, write_pattern_results
from gsr_train.patterns.sources import SourceStats, chain_patterns_from_results, gold_patterns
from gsr_train.retrievers.cosine import cosine_scores
from gsr_train.retrievers.options import SAFEConfig, SimGRAGConfig
from gsr_train.retrievers.safe import SchemaResources, safe_retrieve
from gsr_train.retrievers.simgrag import simgrag_retrieve
from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever
from gsr_train.text.embeddings import get_embeddings
from gsr_train.text.encoders import load_encoder

log = logging.getLogger(__name__)


def resolve_data(data: str, cache_dir: Path) -> str:
    if data == "synthetic":
        return str(ensure_synthetic({}, cache_dir))
    return data


def _recall(split, scores: torch.Tensor, ks: Sequence[int], limit: int | None) -> tuple[dict, dict]:
    """Answer recall at each K (``{"10": v}``) and its 95% bootstrap intervals (``{"10": [low, high]}``)."""
    if limit is not None and limit < len(split):
        scores = scores[: int(split.edge_ptr[limit])]
        split = split.subset(range(limit))
    rep = retrieval_metrics(split, scores, list(ks))
    rec = {str(k): float(v) for k, v in rep.overall["answer_recall"].items() if v is not None}
    bounds = {str(k): list(b) for k, b in rep.intervals["answer_recall"].items() if b is not None}
    return rec, bounds


def _mean_retrieved(split, scores: torch.Tensor, cap: int, limit: int | None) -> float:
    n = len(split) if limit is None else min(limit, len(split))
    found = torch.isfinite(scores[: int(split.edge_ptr[n])]).numpy()
    per_q = torch.from_numpy(segment_sum(found, split.edge_ptr[: n + 1].numpy())).clamp(max=cap)
    return float(per_q.float().mean()) if n else 0.0


@dataclass
class _Comparison:
    """What the stages of one comparison share: the split, its embeddings, the pattern retrievers'
    settings and the rows so far."""

    index: Any
    split_name: str
    split: Any
    emb: Any
    enc: Any
    cache_dir: Path
    out: Path | None
    sim_cfg: Any
    safe_cfg: Any
    ks: Sequence[int]
    limit: int | None
    n_q: int
    max_chains: int
    info: dict[str, Any]
    rows: list[dict] = field(default_factory=list)

    def add(self, method: str, scores: torch.Tensor, ms: float | None, timing: str, **extra) -> None:
        """A table row: answer recall at each K, mean retrieved triples, time per question."""
        recall, bounds = _recall(self.split, scores, self.ks, self.limit)
        row = {
            "method": method,
            "answer_recall": recall,
            "intervals": {"answer_recall": bounds},
            "triples": round(_mean_retrieved(self.split, scores, max(self.ks), self.limit), 1),
            "ms_per_question": None if ms is None else round(ms, 2),
            "timing": timing,
            **extra,
        }
        self.rows.append(row)
        log.info("%s: %s", method, row)

    def cut(self, pats):
        """Patterns of the compared questions only (``limit``): the others get none."""
        return [p if q < self.n_q else [] for q, p in enumerate(pats)]


def compare(
    data: str,
    split_name: str = "test",
    *,
    gsr_results: str | None = None,
    gsr_metrics: str | None = None,
    subgraphrag_results: str | None = None,
    subgraphrag_ckpt: str | None = None,
    encoder: str = "minilm",
    cache_dir: str | Path | None = None,
    out: str | Path | None = None,
    simgrag: dict | None = None,
    safe: dict | None = None,
    gold: str = "filtered",
    max_chains: int = 3,
    ks: Sequence[int] = RECALL_KS,
    limit: int | None = None,
    title: str | None = None,
) -> dict[str, Any]:
    """Every method's row on ``split_name`` of ``data``: cosine, SubgraphRAG and GSR (from their
    results files), SimGRAG and SAFE on GSR-chain and gold patterns; the table and the figures
    (also written into ``out``)."""
    c = _open(data, split_name, encoder, cache_dir, out, simgrag, safe, gold, max_chains, ks, limit)
    _cosine(c)
    if subgraphrag_results:
        _subgraphrag(c, subgraphrag_results, subgraphrag_ckpt)
    gsr_pats = _gsr(c, gsr_results, gsr_metrics) if gsr_results else None
    gold_pats = _gold_patterns(c, gold)
    resources = _schema(c)
    for source, pats in (("GSR chains", gsr_pats), ("gold chains", gold_pats)):
        if pats is not None:
            _pattern_retrievers(c, source, pats, resources)
    return _write(c, title)


def _open(
    data: str,
    split_name: str,
    encoder: str,
    cache_dir: str | Path | None,
    out: str | Path | None,
    simgrag: dict | None,
    safe: dict | None,
    gold: str,
    max_chains: int,
    ks: Sequence[int],
    limit: int | None,
) -> _Comparison:
    """The split's index and embeddings, the pattern retrievers' settings and the figures' header."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    data_dir = resolve_data(data, cache)
    index = get_index(data_dir, splits=index_splits(data_dir, split_name), cache_dir=cache)
    enc = load_encoder(encoder)
    emb = get_embeddings(index, enc, cache, splits=[split_name])
    split = index[split_name]
    n_q = len(split) if limit is None else min(limit, len(split))
    sim_cfg = SimGRAGConfig.from_mapping(simgrag or {})
    safe_cfg = SAFEConfig.from_mapping(safe or {})
    info: dict[str, Any] = {
        "data": data_dir,
        "split": split_name,
        "questions": n_q,
        "encoder": enc.name,
        "simgrag": vars(sim_cfg),
        "safe": vars(safe_cfg),
        "gold_chains": gold,
        "max_chains": max_chains,
    }
    out_dir = Path(out) if out is not None else None
    return _Comparison(
        index, split_name, split, emb, enc, cache, out_dir, sim_cfg, safe_cfg, ks, limit, n_q, max_chains, info
    )


def _cosine(c: _Comparison) -> None:
    """The cosine baseline, timed over the whole split."""
    t0 = time.perf_counter()
    cos = cosine_scores(c.split, c.emb.question[c.split_name], c.emb)
    c.add("cosine", cos, 1000 * (time.perf_counter() - t0) / len(c.split), "measured (whole split)")


def _subgraphrag(c: _Comparison, results: str, ckpt: str | None) -> None:
    """SubgraphRAG's row from its results file, timed by re-scoring the split with ``ckpt`` when given."""
    st = MatchStats()
    sg_scores, _ = read_results(results, c.index, c.split_name, skip_unknown=True, stats=st)
    ms, how = None, "not measured"
    if ckpt:
        retr = SubgraphRAGRetriever.from_checkpoint(ckpt)
        t0 = time.perf_counter()
        retr.retrieve(c.index, c.split_name, c.emb)
        ms, how = 1000 * (time.perf_counter() - t0) / len(c.split), "measured (whole split, from checkpoint)"
    c.add("SubgraphRAG", sg_scores, ms, how, file=str(results), match=st.to_dict())


def _gsr(c: _Comparison, results: str, metrics: str | None) -> list:
    """GSR's row from its results file (its decoding time from its ``metrics.json``); the patterns
    of its chains."""
    st = MatchStats()
    gsr_scores, _ = read_results(results, c.index, c.split_name, skip_unknown=True, stats=st)
    ms, how = None, "not measured"
    if metrics:
        m = json.loads(Path(metrics).read_text())
        un = m.get("unconstrained", {})
        n_eval = un.get("answer_coverage", {}).get("questions") or m.get("data", {}).get("eval_questions")
        if un.get("inference_seconds") and n_eval:
            ms, how = 1000 * un["inference_seconds"] / n_eval, "from GSR metrics (beam decoding + execution)"
    c.add("GSR", gsr_scores, ms, how, file=str(results), match=st.to_dict())
    sstats = SourceStats()
    pats = c.cut(chain_patterns_from_results(results, c.index, c.split_name, c.max_chains, sstats, skip_unknown=True))
    c.info["gsr_patterns"] = sstats.to_dict()
    return pats


def _gold_patterns(c: _Comparison, gold: str) -> list:
    """Patterns of the weak supervision's shortest-path chains (``gold``: filtered or raw), an oracle."""
    sup = get_supervision(c.index, c.split_name, c.cache_dir)
    gstats = SourceStats()
    chains = sup.chains_filtered if gold == "filtered" else sup.chains_raw
    pats = c.cut(gold_patterns(c.index, c.split_name, chains, c.max_chains, gstats))
    c.info["gold_patterns"] = gstats.to_dict()
    return pats


def _schema(c: _Comparison):
    """SAFE's schema resources, built once (its build time reported on its own)."""
    t0 = time.perf_counter()
    resources = SchemaResources.build(c.index, list(c.index.splits), c.enc, c.cache_dir, c.safe_cfg)
    c.info["schema"] = {
        "types": len(resources.schema.types),
        "edges": len(resources.schema),
        "build_seconds": round(time.perf_counter() - t0, 2),
    }
    return resources


def _pattern_retrievers(c: _Comparison, source: str, pats: list, resources) -> None:
    """SimGRAG and SAFE on one pattern source: their rows, and their result files in ``out``."""
    tag = "gsr" if source == "GSR chains" else "gold"
    run = simgrag_retrieve(c.index, c.split_name, c.emb, pats, c.sim_cfg, c.enc, c.cache_dir)
    run.seconds = run.seconds[: c.n_q]
    if c.out is not None:
        write_pattern_results(
            c.out / f"simgrag_{tag}_{c.split_name}.jsonl", c.index, c.split_name, run, f"simgrag-{tag}"
        )
    c.add(
        f"SimGRAG ({source})",
        subgraph_scores(c.split, run.subgraphs),
        1000 * sum(run.seconds) / c.n_q,
        "measured (cost tables + search)",
        summary=run.summary(),
    )
    run, astats = safe_retrieve(c.index, c.split_name, c.emb, pats, c.safe_cfg, c.enc, c.cache_dir, resources)
    run.seconds = run.seconds[: c.n_q]
    if c.out is not None:
        write_pattern_results(c.out / f"safe_{tag}_{c.split_name}.jsonl", c.index, c.split_name, run, f"safe-{tag}")
    c.add(
        f"SAFE ({source})",
        subgraph_scores(c.split, run.subgraphs),
        1000 * sum(run.seconds) / c.n_q,
        "measured (join + cost tables + search)",
        summary=run.summary(),
        join=astats.to_dict(),
    )


def _write(c: _Comparison, title: str | None) -> dict[str, Any]:
    """The table and the figures, written into ``out`` (``comparison.json`` / ``comparison.md``)."""
    data_dir = c.info["data"]
    table = markdown(c.rows, c.ks, f"{title or f'{Path(str(data_dir)).name} [{c.split_name}]'}, {c.n_q} questions")
    result = {**c.info, "rows": c.rows, "table": table}
    if c.out is not None:
        write_json(c.out / "comparison.json", result)
        with atomic_write(c.out / "comparison.md", "w") as f:
            f.write(table + "\n")
    return result


def markdown(rows: Sequence[dict], ks: Sequence[int], title: str) -> str:
    """The comparison table: answer recall at each K with its 95% interval, triples, time."""
    head = ["method"] + [f"ans@{k}" for k in ks] + ["triples", "ms/question"]
    lines = []
    for r in rows:
        bounds = (r.get("intervals") or {}).get("answer_recall") or {}
        ms = "n/a" if r["ms_per_question"] is None else f"{r['ms_per_question']:.1f}"
        recall = [format_cell(r["answer_recall"].get(str(k)), bounds.get(str(k))) for k in ks]
        lines.append([r["method"], *recall, f"{r['triples']:.1f}", ms])
    intro = f"**{title}**: answer recall@K (95% interval), mean retrieved triples (capped at {max(ks)}), retrieval time"
    return intro + "\n\n" + markdown_table(head, lines)
