"""GSR inference: beam search -> valid chains -> subgraph (reasoning paths + triple set).

For every question: the top-B chains by beam search (optionally KG-constrained), each
checked by executing it from the topic entities (both edge directions); the first
``top_n`` valid chains are kept. A kept chain gives

* its triples: every edge on a complete topic -> end walk; the question's triple set is
  the union over kept chains, deduplicated, ranked by the best score of a chain using it;
* its reasoning paths ``e0 -> r1 -> e1 <- r2 <- e2`` (arrows follow the stored edge
  direction; capped at ``max_paths`` per chain);
* its end entities (the paper's answer-coverage variant).

Results go to the project's results format (`gsr_train.eval.results.write_results`):
``triples`` / ``scores`` ranked, ``chains`` (``topic``, ``chain``, ``score``), plus ``paths``
and ``beams`` (every beam with its score, validity and, given the ground chains, ``same_ends``: it
reaches exactly a ground chain's end entities) as extra fields.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gsr_train.datamodules.gsr_chains import chain_relations
from gsr_train.datamodules.gsr_prepare import GSRData
from gsr_train.datamodules.relation_holdout import vocabulary_groups
from gsr_train.eval.chains import (
    ChainReport,
    answer_coverage,
    chain_match,
    chain_match_values,
    coverage_values,
    end_match,
    group_match_values,
    paper_coverage,
    validity,
)
from gsr_train.eval.results import write_results
from gsr_train.kg.execution import ChainExecutor, verbalize_path
from gsr_train.kg.index import KGIndex, SplitGraphs
from gsr_train.models.gsr.decoding import BeamChain, KGConstraint, beam_chains
from gsr_train.models.gsr.options import DecodeConfig

log = logging.getLogger(__name__)


@dataclass
class QuestionRetrieval:
    id: str
    beams: list[dict]  # {"chain": [names] | None, "score", "valid"}
    chains: list[dict] = field(default_factory=list)  # kept: {"topic", "chain", "score"}
    paths: list[str] = field(default_factory=list)
    edges: list[int] = field(default_factory=list)  # split-level edge ids, ranked
    edge_scores: list[float] = field(default_factory=list)
    entities: set[str] = field(default_factory=set)  # entities of the retrieved triples
    ends: list[str] = field(default_factory=list)  # end entities of the kept chains


class GSRRetriever:
    """Runs a trained `GSRModel` over questions whose graphs live in ``graphs``."""

    def __init__(self, gsr, decode: DecodeConfig | dict | None = None, max_paths: int = 64) -> None:
        self.gsr = gsr
        self.decode = DecodeConfig.from_any(decode)
        self.max_paths = int(max_paths)

    def retrieve(
        self,
        ids: Sequence[str],
        questions: Sequence[str],
        graphs: SplitGraphs | None,
        rows: Sequence[int],
        entities: Sequence[str],
        relations: Sequence[str],
        ground: Sequence[Sequence[Sequence[str]]] | None = None,
    ) -> list[QuestionRetrieval]:
        """``rows[i]``: graph of question ``i`` in ``graphs`` (``-1``: no graph, nothing is valid).

        ``ground`` (chains of relation names per question) marks every beam with ``same_ends``:
        it reaches exactly the end entities of a ground chain in the question's graph."""
        if not (len(ids) == len(questions) == len(rows)):
            raise ValueError("ids, questions and rows must have the same length")
        if ground is not None and len(ground) != len(ids):
            raise ValueError(f"{len(ground)} ground chain lists for {len(ids)} questions")
        if graphs is None:
            graphs = _empty_split()
            rows = [-1] * len(rows)
        executor = ChainExecutor(graphs, direction="both")
        cfg = self.decode
        constraint = KGConstraint(self.gsr, executor, relations, rows, shortest=cfg.shortest)
        t0 = time.perf_counter()
        beams = beam_chains(self.gsr, questions, cfg, constraint if cfg.constrained else None)
        self.decode_seconds = time.perf_counter() - t0
        lookup = {r: i for i, r in enumerate(relations)}
        out = []
        for pos, (qid, row, per_q) in enumerate(zip(ids, rows, beams)):
            res = QuestionRetrieval(qid, [])
            kept: list[tuple[tuple[int, ...], BeamChain]] = []
            ends = _ground_ends(executor, row, ground[pos], lookup) if ground is not None else None
            for b in per_q:
                kg = constraint.to_kg(b.chain)
                valid_kg = kg if row >= 0 and kg is not None and executor.is_valid(row, kg) else None
                ok = valid_kg is not None
                res.beams.append(
                    {
                        "chain": list(self.gsr.chain_names(b.chain)) if b.chain is not None else None,
                        "score": b.score,
                        "valid": bool(ok),
                    }
                )
                if ends is not None:
                    front = executor.frontier(row, valid_kg) if valid_kg is not None else None
                    res.beams[-1]["same_ends"] = front is not None and any(torch.equal(front, e) for e in ends)
                if valid_kg is not None and len(kept) < cfg.top_n:
                    kept.append((valid_kg, b))
            best: dict[int, float] = {}
            for kg, b in kept:
                walk = executor.execute(row, kg)
                # a kept chain is valid on the row's graph, so the walk is complete
                assert walk.starts is not None and walk.ends is not None
                names = list(self.gsr.chain_names(b.chain))
                for s in walk.starts.tolist():
                    topic = entities[int(graphs.entity_ids[int(graphs.ent_ptr[row]) + s])]
                    res.chains.append({"topic": topic, "chain": names, "score": b.score})
                for e in executor.global_edges(walk).tolist():
                    if e not in best:
                        best[e] = b.score
                        res.edges.append(e)
                        res.edge_scores.append(b.score)
                n0 = int(graphs.ent_ptr[row])
                res.ends.extend(entities[int(graphs.entity_ids[n0 + x])] for x in walk.ends.tolist())
                res.paths.extend(
                    verbalize_path(p, walk, graphs, entities, relations) for p in executor.paths(walk, self.max_paths)
                )
            if res.edges:
                e = torch.tensor(res.edges)
                g = graphs.entity_ids[graphs.edge_index[:, e] + graphs.ent_ptr[row]]
                res.entities = {entities[int(x)] for x in torch.unique(g).tolist()}
            out.append(res)
        return out


def _ground_ends(
    executor: ChainExecutor, row: int, chains: Sequence[Sequence[str]], lookup: Mapping[str, int]
) -> list[torch.Tensor]:
    """End-entity masks of the ground chains that execute in the question's graph."""
    if row < 0:
        return []
    out = []
    for chain in chains:
        kg = [lookup.get(r, -1) for r in chain]
        if chain and min(kg) >= 0 and executor.is_valid(row, kg):
            out.append(executor.frontier(row, kg))
    return out


def _empty_split() -> SplitGraphs:
    z = torch.zeros(1, dtype=torch.long)
    return SplitGraphs(
        [],
        [],
        [],
        z,
        torch.zeros(0, dtype=torch.long),
        torch.zeros(0, dtype=torch.bool),
        torch.zeros(0, dtype=torch.bool),
        z.clone(),
        torch.zeros(2, 0, dtype=torch.long),
        torch.zeros(0, dtype=torch.long),
    )


def edge_scores(graphs: SplitGraphs, results: Sequence[QuestionRetrieval], rows: Sequence[int]) -> torch.Tensor:
    """FloatTensor[sum E] of the chain scores of retrieved edges (``-inf`` elsewhere)."""
    num_e = int(graphs.edge_ptr[-1]) if len(graphs) else 0
    scores = torch.full((num_e,), -math.inf)
    for res in results:
        if res.edges:
            scores[torch.tensor(res.edges)] = torch.tensor(res.edge_scores, dtype=torch.float32)
    return scores


def evaluate(
    results: Sequence[QuestionRetrieval],
    ground: Sequence[Sequence[tuple[str, ...]]],
    answers: Sequence[Sequence[str] | None],
    top_n: int,
    split: str = "test",
    ns: Sequence[int] = (1, 3, 5, 10),
    groups: Mapping[str, Sequence[int]] | None = None,
) -> ChainReport:
    """All chain metrics; ``answers[i] is None`` leaves question ``i`` out of answer coverage;
    ``groups`` (name -> question positions) adds chain match over each subset."""
    beams = [[tuple(b["chain"]) if b["chain"] is not None else None for b in r.beams] for r in results]
    ns = sorted({*ns, 1, top_n})
    report = ChainReport(split)
    report.match = chain_match(beams, ground, ns)
    flags = None
    if results and all("same_ends" in b for r in results for b in r.beams):
        names = [{tuple(c) for c in g} for g in ground]
        flags = [
            [b["same_ends"] or (c is not None and c in names[i]) for b, c in zip(r.beams, beams[i])]
            for i, r in enumerate(results)
        ]
        report.ends = end_match(flags, ground, ns)
    values = chain_match_values([r.id for r in results], beams, ground, ns, flags)
    for name, rows in (groups or {}).items():
        report.groups[name] = chain_match([beams[i] for i in rows], [ground[i] for i in rows], ns)
    answered = [(i, a) for i, a in enumerate(answers) if a is not None]
    has = [i for i, _ in answered]
    known = [a for _, a in answered]
    retrieved, ends = [results[i].entities for i in has], [results[i].ends for i in has]
    report.coverage = answer_coverage(retrieved, known)
    report.paper = paper_coverage(ends, known)
    report.questions = coverage_values(group_match_values(values, groups or {}), has, retrieved, ends, known)
    report.valid = validity([[b["valid"] for b in results[i].beams] for i in has], top_n)
    sizes = [len(results[i].edges) for i in has]
    report.extra = {
        "mean_triples": float(sum(sizes) / len(sizes)) if sizes else 0.0,
        "mean_kept_chains": float(
            sum(len({tuple(c["chain"]) for c in results[i].chains}) for i in has) / max(len(has), 1)
        ),
        "questions_with_graph": len(has),
    }
    return report


def retrieve_and_evaluate(
    gsr, data: GSRData, decode: DecodeConfig, split: str, ns: Sequence[int] = (1, 3, 5, 10), max_paths: int = 64
) -> tuple[list[QuestionRetrieval], list[int], ChainReport]:
    """Decode every evaluation question of ``data`` with ``decode`` (constrained or not), execute the
    chains on the questions' graphs and measure everything (`evaluate`, with chain match over the
    questions whose ground chains use only relations of the model's training chains, ``seen``, and the
    others, ``unseen``). Returns the per-question results, each one's row in ``data.graph_index["eval"]``
    (``-1``: no graphs) and the report. An open-vocabulary model first gets every relation of the graphs'
    KG by name."""
    ev, gidx = data.evaluation, data.graph_index
    has_graph = data.has_graph or [gidx is not None] * len(ev)
    rows = list(range(len(ev))) if gidx is not None else [-1] * len(ev)
    if getattr(gsr, "open_vocabulary", False) and data.kg_relations:  # every relation of the graphs' KG
        added = gsr.extend_relations(data.kg_relations)
        if added:
            log.info("open-vocabulary GSR: %d relations of the KG added to the output vocabulary by name", added)
    retriever = GSRRetriever(gsr, decode, max_paths=max_paths)
    t0 = time.perf_counter()
    graphs = gidx["eval"] if gidx is not None else None
    ground = [q.ground for q in ev]
    entities = gidx.entities if gidx is not None else []
    results = retriever.retrieve(
        [q.id for q in ev],
        [q.question for q in ev],
        graphs,
        rows,
        entities,
        data.kg_relations,
        ground=ground if graphs is not None else None,
    )
    seconds = time.perf_counter() - t0
    answers = [graphs.answers[i] if (graphs is not None and has_graph[i]) else None for i in range(len(ev))]
    seen = getattr(gsr, "chain_relations", None)  # the model's own training chains when it recorded them
    if seen is None and data.train:
        seen = chain_relations(data.train)
    groups = vocabulary_groups(ground, seen) if seen is not None else None
    report = evaluate(results, ground, answers, decode.top_n, split=split, ns=list(ns), groups=groups)
    report.extra.update(
        {"decode": vars(decode), "inference_seconds": seconds, "decode_seconds": retriever.decode_seconds}
    )
    return results, rows, report


def write_gsr_results(
    path: str | Path, index: KGIndex, split_name: str, results: Sequence[QuestionRetrieval], rows: Sequence[int]
) -> int:
    """Write results in the project format; ``index[split_name]`` must hold the questions' graphs in order."""
    graphs = index[split_name]
    if len(graphs) != len(results):
        raise ValueError(f"{len(results)} results for a split of {len(graphs)} questions")
    if any(r != i for i, r in enumerate(rows)):
        raise ValueError("write_gsr_results needs results in the split's question order (rows[i] == i)")
    scores = edge_scores(graphs, results, rows)
    k = max([len(r.edges) for r in results] + [1])
    chains = [r.chains for r in results]
    extra: dict[str, Sequence[Any]] = {"paths": [r.paths for r in results], "beams": [r.beams for r in results]}
    return write_results(path, index, split_name, scores, k, chains=chains, extra=extra)
