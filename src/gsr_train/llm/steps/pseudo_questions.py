"""Pseudo questions per relation (GSR's indexing data: question -> relation token).

    gsr-train llm-pseudo-questions data.dir=../shared/data/webqsp_mini limit=20
    gsr-train llm-pseudo-questions data.dir=rmanluo/RoG-webqsp relations=file \\
        relation_file=../shared/data/freebase_relations.txt llm=openai

Hydra app (config: conf/prep/llm_pseudo_questions.yaml; the endpoint: conf/llm/*.yaml; resumable).

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

from gsr_train.arrays import scatter
from gsr_train.io import open_text, stable_hash
from gsr_train.kg.index import get_index
from gsr_train.llm.client import ChatClient, ChatRequest, ChatResult
from gsr_train.llm.parsing import check_templates, parse_templates
from gsr_train.llm.runner import companion, to_container
from gsr_train.llm.steps.common import Prompts, ask_answers, data_dir, note_skipped, open_step, ordered_counts, window

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


_COUNT_ORDER = (
    "relations_answered",
    "templates_kept",
    "templates_rejected",
    "relations_without_valid_template",
    "pseudo_questions",
    "templates_without_subject",
    "relations_without_subjects_skipped",
)


def _load_index(cfg: dict):
    """The KG index of ``data.dir`` (its ``splits``), or None when no dataset is given."""
    folder = data_dir(cfg)
    if not folder:
        return None

    return get_index(
        folder,
        splits=tuple(cfg.get("splits") or ("train", "validation", "test")),
        cache_dir=cfg.get("cache_dir"),
    )


def _relations(cfg: dict, index) -> list[str]:
    """The relations to ask about: ``only``, else those of a schema file or of the index."""
    mode = cfg.get("relations", "index")
    if cfg.get("only"):
        return list(dict.fromkeys(cfg["only"]))
    if mode == "file":
        if not cfg.get("relation_file"):
            raise ValueError("llm_pseudo_questions: relations=file needs relation_file=<path>")
        return relations_from_file(cfg["relation_file"], cfg.get("min_parts", 3), cfg.get("max_parts", 3))
    if mode == "index":
        if index is None:
            raise ValueError("llm_pseudo_questions: relations=index needs data.dir=<RoG folder / hub name>")
        lo, hi = cfg.get("min_parts", 3), cfg.get("max_parts", 3)
        return sorted(r for r in index.relations if lo <= len(r.split(".")) <= hi)
    raise ValueError(f"llm_pseudo_questions: relations must be 'index' or 'file', not {mode!r}")


def _with_subjects(
    cfg: dict, index, relations: list[str], counts: Counter
) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
    """Subjects and an example triple per relation from the index; with ``require_subjects``
    the relations without a subject are dropped (and counted) before the window is cut."""
    subjects, examples = (
        ({}, {})
        if index is None
        else subjects_by_relation(index, list(index.splits), relations, int(cfg.get("max_subjects", 1000)))
    )
    if cfg.get("require_subjects", True):
        if index is None:
            raise ValueError("llm_pseudo_questions: require_subjects needs data.dir=<RoG source> to find subjects")
        counts["relations_without_subjects_skipped"] = sum(1 for r in relations if not subjects.get(r))
        relations = [r for r in relations if subjects.get(r)]
    return window(relations, cfg), subjects, examples


def _request(prompts: Prompts, relation: str, examples: dict[str, list[str]], n_templates: int) -> ChatRequest:
    """The relation with one example triple (if the KG has one with text) as the prompt's fields."""
    ex = examples.get(relation)
    example = f"({ex[0]}, {ex[1]}, {ex[2]})" if ex else "none available"
    return prompts.request(relation, relation=relation, example=example, num_templates=n_templates)


def _answer_rows(
    cfg: dict, r: str, res: ChatResult, request: ChatRequest, subjects: list[str], counts: Counter, reasons: Counter
) -> tuple[list[dict], dict]:
    """One answered relation: its checked templates filled with subjects, and its responses row."""
    n_templates = int(cfg.get("num_templates", 10))
    prompt_text = "\n".join(m["content"] for m in request.messages)
    check = check_templates(
        parse_templates(res.text or ""),
        max_templates=n_templates,
        prompt=prompt_text,
        require_question_mark=bool(cfg.get("require_question_mark", False)),
    )
    reasons.update(x["reason"] for x in check.rejected)
    filled = fill(r, check.kept, subjects, int(cfg.get("questions_per_template", 1)), int(cfg.get("seed", 0)))
    counts["relations_answered"] += 1
    counts["templates_kept"] += len(check.kept)
    counts["templates_rejected"] += len(check.rejected)
    counts["relations_without_valid_template"] += not check.kept
    counts["pseudo_questions"] += sum("question" in row for row in filled)
    counts["templates_without_subject"] += sum("question" not in row for row in filled)
    response = {
        "relation": r,
        "templates": check.kept,
        "rejected": check.rejected,
        "raw_response": res.text,
        "request_key": res.key,
    }
    return filled, response


def run(cfg: Mapping[str, Any], client: ChatClient | None = None) -> dict:
    """Run the step from a config (see ``conf/prep/llm_pseudo_questions.yaml``); returns the summary."""
    cfg = to_container(cfg)
    counts: Counter = Counter()
    index = _load_index(cfg)
    relations, subjects, examples = _with_subjects(cfg, index, _relations(cfg, index), counts)
    n_templates = int(cfg.get("num_templates", 10))
    prompts = Prompts(cfg, "pseudo_questions")
    req_by_rel = {r: _request(prompts, r, examples, n_templates) for r in relations}
    responses_path = companion(cfg["output"], ".responses.jsonl.gz")
    with open_step("llm_pseudo_questions", cfg, client, reuse_from=responses_path) as step:
        answered, skipped = ask_answers(step, relations, [req_by_rel[r] for r in relations])
        rows, responses = [], []
        reasons: Counter = Counter()
        for r, res in answered:
            filled, response = _answer_rows(cfg, r, res, req_by_rel[r], subjects.get(r, []), counts, reasons)
            rows.extend(filled)
            responses.append(response)
        ordered = ordered_counts(counts, {"relations": len(relations)}, _COUNT_ORDER)
        ordered.update({f"rejected_{k}": v for k, v in sorted(reasons.items())})
        note_skipped(ordered, skipped, "skipped_relations")
        ordered["responses_file"] = str(responses_path)
        return step.finish(rows, ordered, extra_outputs={responses_path: responses}, config=cfg)
