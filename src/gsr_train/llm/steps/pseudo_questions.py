"""Pseudo questions per relation (GSR's indexing data: question -> relation token).

For every relation the model writes ~10 question templates with one ``[SUBJECT]`` slot.
Templates are validated (slot exactly once, some question text, no duplicate after
normalisation; rejects are counted by reason) and filled with real subject entities: heads
of that relation in the KG index's graphs, skipping raw Freebase ids without text. Subjects
are drawn with a seeded RNG per relation, so a re-run gives the same questions.

Outputs: ``{"relation", "template", "subject", "question"}`` rows, plus a responses file
(``<output>.responses.jsonl.gz``: raw answer, kept and rejected templates per relation).
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch_geometric.utils import scatter

from gsr_train.io import open_text, stable_hash
from gsr_train.llm.client import ChatClient, ChatRequest
from gsr_train.llm.parsing import check_templates, parse_templates
from gsr_train.llm.prompts import load_prompt, messages
from gsr_train.llm.runner import StepRun, companion, to_container

log = logging.getLogger(__name__)


def relations_from_file(path: str, min_parts: int = 3, max_parts: int = 3) -> list[str]:
    """Relation names from a schema list (e.g. ``freebase_relations.txt``): names with 3 parts.

    The file mixes domains (1 part), types (2) and relations (3); ``base.*`` user domains can
    have more parts, which ``max_parts`` lets through.
    """
    with open_text(path) as f:
        names = [line.strip() for line in f if line.strip()]
    return sorted({n for n in names if min_parts <= len(n.split(".")) <= max_parts})


def subjects_by_relation(
    index,
    splits,
    relations: list[str],
    max_subjects: int = 1000,
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Per relation: up to ``max_subjects`` distinct heads with text (most frequent first) and one
    example triple (head and tail with text)."""
    rel_id = index.relation_lookup()
    wanted = torch.tensor([rel_id[r] for r in relations if r in rel_id], dtype=torch.long)
    if not len(wanted):
        return {}, {}
    num_e = len(index.entities)
    has_text = index.entity_has_text()
    # run by run (bounded memory): distinct (relation, head) keys with counts, and the first
    # edge of every relation whose head and tail have text
    keys: list[torch.Tensor] = []
    key_counts: list[torch.Tensor] = []
    first_edge: dict[int, list[int]] = {}
    for s in splits:
        for edges in index[s].global_edge_chunks():  # [e, 3] head, rel, tail
            edges = edges[torch.isin(edges[:, 1], wanted)]
            edges = edges[has_text[edges[:, 0]]]
            if not len(edges):
                continue
            uniq, counts = torch.unique(edges[:, 1] * num_e + edges[:, 0], return_counts=True)
            keys.append(uniq)
            key_counts.append(counts)
            both = edges[has_text[edges[:, 2]]]
            if len(both):
                rels, first = torch.unique(both[:, 1], return_inverse=True)
                pos = scatter(torch.arange(len(both)), first, 0, dim_size=len(rels), reduce="min")
                for r, p in zip(rels.tolist(), pos.tolist()):
                    first_edge.setdefault(r, both[p].tolist())
    if not keys:
        return {}, {}
    uniq, inverse = torch.unique(torch.cat(keys), return_inverse=True)
    counts = scatter(torch.cat(key_counts), inverse, 0, dim_size=len(uniq), reduce="sum")
    # most frequent head first, ties by id: sort by (relation, -count, head), then cut per relation
    rel_of, head_of = (uniq // num_e).numpy(), (uniq % num_e).numpy()
    order = np.lexsort((head_of, -counts.numpy(), rel_of))
    rel_of, head_of = rel_of[order], head_of[order]
    starts = np.flatnonzero(np.r_[True, rel_of[1:] != rel_of[:-1]])
    subjects: dict[str, list[str]] = {}
    for r, heads in zip(rel_of[starts].tolist(), np.split(head_of, starts[1:])):
        subjects[index.relations[r]] = [index.entities[h] for h in heads[:max_subjects].tolist()]
    examples: dict[str, list[str]] = {}
    for r in sorted(first_edge):
        h, _, t = first_edge[r]
        examples[index.relations[r]] = [index.entities[h], index.relations[r], index.entities[t]]
    return subjects, examples


def fill(relation: str, templates: list[str], subjects: list[str], per_template: int, seed: int) -> list[dict]:
    """Pseudo questions: each template filled with ``per_template`` subjects (seeded, spread).

    A relation without a KG subject (``require_subjects=false``, e.g. every name of
    ``freebase_relations.txt``) keeps its templates as rows without a subject; training fills them
    with its fallback subject (``the <type>``, ``gsr.index.fallback_subject``)."""
    if not subjects:
        return [{"relation": relation, "template": t} for t in templates]
    rng = random.Random(stable_hash("pseudo-questions", seed, relation))
    pool = list(subjects)
    rng.shuffle(pool)
    out = []
    for j, t in enumerate(templates):
        for k in range(per_template):
            s = pool[(j * per_template + k) % len(pool)]
            out.append({"relation": relation, "template": t, "subject": s, "question": t.replace("[SUBJECT]", s)})
    return out


def run(cfg: Mapping[str, Any], client: ChatClient | None = None) -> dict:
    """Run the step from a config (see ``conf/prep/llm_pseudo_questions.yaml``); returns the summary."""
    cfg = to_container(cfg)
    counts: Counter = Counter()
    index = None
    if cfg.get("dataset"):
        from gsr_train.kg.index import get_index

        index = get_index(
            cfg["dataset"],
            splits=tuple(cfg.get("splits") or ("train", "validation", "test")),
            cache_dir=cfg.get("cache_dir"),
        )
    mode = cfg.get("relations", "index")
    if cfg.get("only"):
        relations = list(dict.fromkeys(cfg["only"]))
    elif mode == "file":
        if not cfg.get("relation_file"):
            raise ValueError("llm_pseudo_questions: relations=file needs relation_file=<path>")
        relations = relations_from_file(cfg["relation_file"], cfg.get("min_parts", 3), cfg.get("max_parts", 3))
    elif mode == "index":
        if index is None:
            raise ValueError("llm_pseudo_questions: relations=index needs dataset=<RoG folder / hub name>")
        lo, hi = cfg.get("min_parts", 3), cfg.get("max_parts", 3)
        relations = sorted(r for r in index.relations if lo <= len(r.split(".")) <= hi)
    else:
        raise ValueError(f"llm_pseudo_questions: relations must be 'index' or 'file', not {mode!r}")
    offset, limit = int(cfg.get("offset") or 0), cfg.get("limit")
    subjects, examples = (
        ({}, {})
        if index is None
        else subjects_by_relation(index, list(index.splits), relations, int(cfg.get("max_subjects", 1000)))
    )
    if cfg.get("require_subjects", True):
        if index is None:
            raise ValueError("llm_pseudo_questions: require_subjects needs dataset=<RoG source> to find subjects")
        counts["relations_without_subjects_skipped"] = sum(1 for r in relations if not subjects.get(r))
        relations = [r for r in relations if subjects.get(r)]
    relations = relations[offset : None if limit is None else offset + int(limit)]

    n_templates = int(cfg.get("num_templates", 10))
    system, user = load_prompt(cfg["prompt"]["system"]), load_prompt(cfg["prompt"]["user"])
    requests = []
    for r in relations:
        ex = examples.get(r)
        example = f"({ex[0]}, {ex[1]}, {ex[2]})" if ex else "none available"
        requests.append(
            ChatRequest(
                r,
                messages(system, user, f"pseudo_questions {r}", relation=r, example=example, num_templates=n_templates),
            )
        )
    req_by_rel = dict(zip(relations, requests))
    responses_path = companion(cfg["output"], ".responses.jsonl.gz")
    with StepRun(
        "llm_pseudo_questions",
        cfg.get("llm"),
        cfg["output"],
        reuse_from=responses_path,
        reuse_output=cfg.get("reuse_output", True),
        client=client,
    ) as step:
        results = step.ask(requests)
        rows, responses, skipped = [], [], []
        reasons: Counter = Counter()
        for r, res in zip(relations, results):
            if res.text is None:  # not res.ok
                skipped.append(r)
                continue
            prompt_text = "\n".join(m["content"] for m in req_by_rel[r].messages)
            check = check_templates(
                parse_templates(res.text),
                max_templates=n_templates,
                prompt=prompt_text,
                require_question_mark=bool(cfg.get("require_question_mark", False)),
            )
            reasons.update(x["reason"] for x in check.rejected)
            filled = fill(
                r, check.kept, subjects.get(r, []), int(cfg.get("questions_per_template", 1)), int(cfg.get("seed", 0))
            )
            counts["relations_answered"] += 1
            counts["templates_kept"] += len(check.kept)
            counts["templates_rejected"] += len(check.rejected)
            counts["relations_without_valid_template"] += not check.kept
            counts["pseudo_questions"] += sum("question" in row for row in filled)
            counts["templates_without_subject"] += sum("question" not in row for row in filled)
            rows.extend(filled)
            responses.append(
                {
                    "relation": r,
                    "templates": check.kept,
                    "rejected": check.rejected,
                    "raw_response": res.text,
                    "request_key": res.key,
                }
            )
        ordered: dict[str, Any] = {
            "relations": len(relations),
            **{
                k: counts[k]
                for k in (
                    "relations_answered",
                    "templates_kept",
                    "templates_rejected",
                    "relations_without_valid_template",
                    "pseudo_questions",
                    "templates_without_subject",
                    "relations_without_subjects_skipped",
                )
            },
        }
        ordered.update({f"rejected_{k}": v for k, v in sorted(reasons.items())})
        ordered["requests_skipped_after_errors"] = len(skipped)
        if skipped:
            ordered["skipped_relations"] = skipped
        ordered["responses_file"] = str(responses_path)
        return step.finish(rows, ordered, extra_outputs={responses_path: responses}, config=cfg)
