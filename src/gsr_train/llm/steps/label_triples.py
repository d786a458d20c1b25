"""Relevance labels: up to 20 triples per question that an LLM judges relevant (SubgraphRAG app. D).

    gsr-train llm-label-triples data.dir=../shared/data/webqsp_mini split=test limit=20
    gsr-train llm-label-triples data.dir=rmanluo/RoG-webqsp retrieval=path/to/results_test.jsonl llm=openai

Hydra app (config: conf/prep/llm_label_triples.yaml; the endpoint: conf/llm/*.yaml; resumable).

The model sees the question and candidate triples (the top of a retrieval-result file, or the
question's graph triples cut to ``num_candidates``) and answers with ``evidence:`` lines.
Only offered triples can be labelled: any other triple is rejected and counted. Rows are
``{"id", "triples": [[h, r, t], ...], "raw_response", ...}`` in the format of
``webqsp_mini/gpt_triples_*.jsonl.gz``, which `gsr_train.eval.labels` reads for
labelled-triple recall. A row with no triple means "no label" (skipped by that metric).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from gsr_train.kg.index import get_index
from gsr_train.llm.client import ChatClient, ChatRequest, ChatResult
from gsr_train.llm.parsing import parse_triple_selection
from gsr_train.llm.runner import read_jsonl, to_container
from gsr_train.llm.steps.common import Prompts, ask_answers, data_dir, note_skipped, open_step, ordered_counts, window

log = logging.getLogger(__name__)


def graph_candidates(index, split: str, i: int, n: int) -> list[list[str]]:
    """The first ``n`` triples of question ``i``'s graph (row order) as strings."""
    g = index[split].graph(i)
    heads = g.entity_ids[g.edge_index[0, :n]].tolist()
    tails = g.entity_ids[g.edge_index[1, :n]].tolist()
    rels = g.edge_rel[:n].tolist()
    return [[index.entities[h], index.relations[r], index.entities[t]] for h, r, t in zip(heads, rels, tails)]


def retrieval_candidates(path: str, ids: set[str], n: int, skip_unknown: bool) -> tuple[dict[str, list], int]:
    """Top ``n`` distinct triples per id from a retrieval-result JSONL; also the unknown-id count."""
    out, unknown = {}, 0
    for lineno, row in enumerate(read_jsonl(path), start=1):
        qid = row.get("id") if isinstance(row, dict) else None
        trips = row.get("triples") if isinstance(row, dict) else None
        if (
            not isinstance(qid, str)
            or not isinstance(trips, list)
            or not all(isinstance(t, list) and len(t) == 3 and all(isinstance(x, str) for x in t) for t in trips)
        ):
            raise ValueError(f"{path}: line {lineno}: expected {{'id': str, 'triples': [[h, r, t], ...]}}")
        if qid not in ids:
            unknown += 1
            if not skip_unknown:
                raise ValueError(f"{path}: line {lineno}: id {qid!r} is not in the split (set skip_unknown=true)")
            continue
        if qid in out:
            raise ValueError(f"{path}: line {lineno}: duplicate id {qid!r}")
        out[qid] = [list(t) for t in dict.fromkeys(map(tuple, trips))][:n]
    return out, unknown


_COUNT_ORDER = (
    "questions_answered",
    "candidates_offered",
    "triples_kept",
    "triples_rejected",
    "triples_over_limit",
    "questions_with_labels",
    "questions_with_rejections",
    "questions_without_candidates",
)


def _candidates(cfg: dict, counts: Counter) -> tuple[Any, list[int], dict[str, list]]:
    """The split's graphs, the windowed question positions and each question's candidate triples.

    Candidates are the top of a retrieval-result file when ``retrieval`` is set (unknown ids
    counted, or refused unless ``skip_unknown``), else the first ``num_candidates`` graph triples.
    """
    folder = data_dir(cfg)
    if not folder:
        raise ValueError("llm_label_triples: set data.dir=<RoG folder / hub name> (questions and graphs)")
    split = cfg.get("split", "test")
    index = get_index(folder, splits=(split,), cache_dir=cfg.get("cache_dir"))
    graphs = index[split]
    n_cand = int(cfg.get("num_candidates", 40))
    positions = window(list(range(len(graphs))), cfg)
    if cfg.get("retrieval"):
        by_id, counts["retrieval_rows_unknown_id"] = retrieval_candidates(
            cfg["retrieval"], set(graphs.ids), n_cand, bool(cfg.get("skip_unknown", False))
        )
        return graphs, positions, {graphs.ids[i]: by_id.get(graphs.ids[i], []) for i in positions}
    return graphs, positions, {graphs.ids[i]: graph_candidates(index, split, i, n_cand) for i in positions}


def _request(prompts: Prompts, qid: str, question: str, cands: list, numbered: bool, max_triples: int) -> ChatRequest:
    """The question and its candidates as ``(h, r, t)`` lines (numbered if the prompt wants numbers)."""
    lines = [f"({h}, {r}, {t})" for h, r, t in cands]
    if numbered:
        lines = [f"{k}. {x}" for k, x in enumerate(lines, start=1)]
    return prompts.request(qid, question=question, triples="\n".join(lines), max_triples=max_triples)


def _row(qid: str, cands: list, res: ChatResult, max_triples: int, numbered: bool, counts: Counter) -> dict:
    """One answered question: the offered triples the model named (others rejected), counted."""
    sel = parse_triple_selection(res.text or "", cands, limit=max_triples, numbered=numbered)
    chosen = [cands[k] for k in sel.selected]
    counts["questions_answered"] += 1
    counts["candidates_offered"] += len(cands)
    counts["triples_kept"] += len(chosen)
    counts["triples_rejected"] += len(sel.rejected)
    counts["triples_over_limit"] += sel.over_limit
    counts["questions_with_labels"] += bool(chosen)
    counts["questions_with_rejections"] += bool(sel.rejected)
    counts[f"parsed_by_{sel.method}"] += 1
    return {
        "id": qid,
        "triples": chosen,
        "rejected": sel.rejected,
        "num_candidates": len(cands),
        "raw_response": res.text,
        "request_key": res.key,
    }


def run(cfg: Mapping[str, Any], client: ChatClient | None = None) -> dict:
    """Run the step from a config (see ``conf/prep/llm_label_triples.yaml``); returns the summary."""
    cfg = to_container(cfg)
    counts: Counter = Counter()
    graphs, positions, cands = _candidates(cfg, counts)
    max_triples = int(cfg.get("max_triples", 20))
    numbered = bool(cfg.get("numbered_candidates", False))
    prompts = Prompts(cfg, "label_triples")
    asked = [i for i in positions if cands[graphs.ids[i]]]  # a question without candidates is not asked
    requests = [
        _request(prompts, graphs.ids[i], graphs.questions[i], cands[graphs.ids[i]], numbered, max_triples)
        for i in asked
    ]
    with open_step("llm_label_triples", cfg, client) as step:
        answered, skipped = ask_answers(step, [graphs.ids[i] for i in asked], requests)
        rows = [_row(qid, cands[qid], res, max_triples, numbered, counts) for qid, res in answered]
        counts["questions_without_candidates"] += len(positions) - len(asked)
        ordered = ordered_counts(counts, {"questions": len(positions), "requests": len(requests)}, _COUNT_ORDER)
        note_skipped(ordered, skipped, "skipped_ids")
        n_cand = int(cfg.get("num_candidates", 40))
        ordered["candidates_from"] = cfg.get("retrieval") or f"graph (first {n_cand} triples)"
        return step.finish(rows, ordered, config=cfg)
