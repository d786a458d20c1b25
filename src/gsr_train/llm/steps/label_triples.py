"""Relevance labels: up to 20 triples per question that an LLM judges relevant (SubgraphRAG app. D).

The model sees the question and candidate triples (the top of a retrieval-result file, or the
question's graph triples cut to ``num_candidates``) and answers with ``evidence:`` lines.
Only offered triples can be labelled: any other triple is rejected and counted. Rows are
``{"id", "triples": [[h, r, t], ...], "raw_response", ...}`` in the format of
``webqsp_mini/gpt_triples_*.jsonl.gz``, which :mod:`gsr_train.eval.labels` reads for
labelled-triple recall. A row with no triple means "no label" (skipped by that metric).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from gsr_train.llm.client import ChatClient, ChatRequest
from gsr_train.llm.parsing import parse_triple_selection
from gsr_train.llm.prompts import load_prompt, messages
from gsr_train.llm.runner import StepRun, read_jsonl, to_container

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


def run(cfg: Mapping[str, Any], client: ChatClient | None = None) -> dict:
    """Run the step from a config (see ``conf/prep/llm_label_triples.yaml``); returns the summary."""
    from gsr_train.kg.index import get_index

    cfg = to_container(cfg)
    if not cfg.get("dataset"):
        raise ValueError("llm_label_triples: set dataset=<RoG folder / hub name> (questions and graphs)")
    split = cfg.get("split", "test")
    index = get_index(cfg["dataset"], splits=(split,), cache_dir=cfg.get("cache_dir"))
    graphs = index[split]
    n_cand, max_triples = int(cfg.get("num_candidates", 40)), int(cfg.get("max_triples", 20))
    positions = list(range(len(graphs)))
    offset, limit = int(cfg.get("offset") or 0), cfg.get("limit")
    positions = positions[offset : None if limit is None else offset + int(limit)]
    counts: Counter = Counter()
    if cfg.get("retrieval"):
        by_id, counts["retrieval_rows_unknown_id"] = retrieval_candidates(
            cfg["retrieval"], set(graphs.ids), n_cand, bool(cfg.get("skip_unknown", False))
        )
        cands = {graphs.ids[i]: by_id.get(graphs.ids[i], []) for i in positions}
    else:
        cands = {graphs.ids[i]: graph_candidates(index, split, i, n_cand) for i in positions}
    numbered = bool(cfg.get("numbered_candidates", False))
    system, user = load_prompt(cfg["prompt"]["system"]), load_prompt(cfg["prompt"]["user"])
    requests, asked = [], []
    for i in positions:
        qid = graphs.ids[i]
        if not cands[qid]:
            continue
        lines = [f"({h}, {r}, {t})" for h, r, t in cands[qid]]
        if numbered:
            lines = [f"{k}. {x}" for k, x in enumerate(lines, start=1)]
        requests.append(
            ChatRequest(
                qid,
                messages(
                    system,
                    user,
                    f"label_triples {qid}",
                    question=graphs.questions[i],
                    triples="\n".join(lines),
                    max_triples=max_triples,
                ),
            )
        )
        asked.append(qid)

    with StepRun(
        "llm_label_triples", cfg.get("llm"), cfg["output"], reuse_output=cfg.get("reuse_output", True), client=client
    ) as step:
        results = dict(zip(asked, step.ask(requests)))
        rows, skipped = [], []
        for i in positions:
            qid = graphs.ids[i]
            if not cands[qid]:
                counts["questions_without_candidates"] += 1
                continue
            res = results[qid]
            if res.text is None:  # not res.ok
                skipped.append(qid)
                continue
            sel = parse_triple_selection(res.text, cands[qid], limit=max_triples, numbered=numbered)
            chosen = [cands[qid][k] for k in sel.selected]
            counts["questions_answered"] += 1
            counts["candidates_offered"] += len(cands[qid])
            counts["triples_kept"] += len(chosen)
            counts["triples_rejected"] += len(sel.rejected)
            counts["triples_over_limit"] += sel.over_limit
            counts["questions_with_labels"] += bool(chosen)
            counts["questions_with_rejections"] += bool(sel.rejected)
            counts[f"parsed_by_{sel.method}"] += 1
            rows.append(
                {
                    "id": qid,
                    "triples": chosen,
                    "rejected": sel.rejected,
                    "num_candidates": len(cands[qid]),
                    "raw_response": res.text,
                    "request_key": res.key,
                }
            )
        ordered: dict[str, Any] = {
            "questions": len(positions),
            "requests": len(requests),
            **{
                k: counts[k]
                for k in (
                    "questions_answered",
                    "candidates_offered",
                    "triples_kept",
                    "triples_rejected",
                    "triples_over_limit",
                    "questions_with_labels",
                    "questions_with_rejections",
                    "questions_without_candidates",
                )
            },
        }
        ordered.update({k: v for k, v in sorted(counts.items()) if k not in ordered})
        ordered["requests_skipped_after_errors"] = len(skipped)
        if skipped:
            ordered["skipped_ids"] = skipped
        ordered["candidates_from"] = cfg.get("retrieval") or f"graph (first {n_cand} triples)"
        return step.finish(rows, ordered, config=cfg)
