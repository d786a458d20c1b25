"""Open-ended questions (OKGQA) about the topic entities of a RoG dataset's graphs, written by an LLM.

    gsr-train llm-open-questions data.dir=../shared/data/webqsp_mini split=test limit=20
    gsr-train llm-open-questions data.dir=rmanluo/RoG-webqsp per_graph=5 llm=openai

Hydra app (config: conf/prep/llm_open_questions.yaml; the endpoint: conf/llm/*.yaml; resumable).

Per graph the model sees its named topic entities, entities of the same kind (for
comparisons) and a few facts of the graph, and writes one question for each category it is
asked (``per_graph`` of ``types``, in turn across graphs, as the template set does), one
``<category>: <question>`` line each. A line is kept only if it parses, names a requested
category, ends with "?" and names a topic entity; every other line is rejected and counted
by reason, never kept. Graphs without a named topic entity are counted and not asked.

Outputs: `gsr_train.data.open_questions.OpenQuestion` rows (source ``llm``, with
``raw_response`` and ``request_key``), read by `gsr_train.data.open_questions.read_questions`,
and ``<output>.responses.jsonl.gz`` (every answer with its kept and rejected lines, also of the
graphs that got no question), from which a re-run takes its answers.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gsr_train.data.open_questions import (
    CATEGORIES,
    TEMPLATES,
    GraphEntities,
    OpenQuestion,
    assign_types,
    category_of,
    check_types,
)
from gsr_train.kg.index import get_index, names_have_text
from gsr_train.llm.client import ChatClient, ChatRequest, ChatResult
from gsr_train.llm.parsing import split_marker
from gsr_train.llm.runner import companion, to_container
from gsr_train.llm.steps.common import Prompts, ask_answers, data_dir, note_skipped, open_step, ordered_counts, window

log = logging.getLogger(__name__)

# Why a line of an answer is not kept, in the order the checks run.
REJECT_REASONS = (
    "unparsed",  # not "<category>: <question>"
    "unknown_category",  # the label is not an OKGQA category (nor one of its sub-types)
    "empty",  # nothing after the label
    "not_requested",  # a category this graph was not asked for
    "no_question_mark",  # does not end with "?" (require_question_mark)
    "no_entity_named",  # names no topic entity of the graph (require_entity)
    "duplicate",  # the same question again (case, spaces and punctuation aside)
    "over_limit",  # a second question for a category already answered
)
_LABELLED = re.compile(r"^([A-Za-z][A-Za-z _/-]{0,39}?)\s*:\s*(.*)$")


def graph_entities(index, split: str, i: int, max_related: int = 3) -> GraphEntities:
    """The named topic entities of question ``i``'s graph, and up to ``max_related`` entities of
    the same kind: named entities that share at least two (relation, direction) pairs with the
    topic entities, most shared relations (Jaccard) first, then by name. Raw Freebase ids and
    CVT nodes are not names."""
    graphs = index[split]
    g = graphs.graph(i)
    names = index.entities.take(g.entity_ids.numpy())
    named = names_have_text(names)
    topic_local = np.flatnonzero(g.topic_mask.numpy()).tolist()
    topics = tuple(dict.fromkeys(names[k] for k in topic_local if named[k]))
    related: tuple[str, ...] = ()
    if topics and max_related > 0:
        shared, union = _shared_signatures(g, topic_local, len(index.relations))
        scored = [
            (-shared[k] / union[k], -int(shared[k]), name)
            for k, name in enumerate(names)
            if shared[k] >= 2 and named[k] and name not in topics
        ]
        related = tuple(dict.fromkeys(name for _, _, name in sorted(scored)))[:max_related]
    return GraphEntities(graphs.ids[i], i, topics, related)


def _shared_signatures(g, topic_local: list[int], num_relations: int) -> tuple[np.ndarray, np.ndarray]:
    """Per node of graph ``g``: how many (relation, direction) pairs it shares with the topic
    entities, and the size of the union of both sets (Jaccard's denominator); one ``unique`` over
    the graph's edges, no loop over them."""
    n = int(g.entity_ids.numel())
    heads, tails, rels = g.edge_index[0].numpy(), g.edge_index[1].numpy(), g.edge_rel.numpy().astype(np.int64)
    nodes = np.concatenate([heads, tails]).astype(np.int64)
    pairs = np.concatenate([rels * 2, rels * 2 + 1])  # (relation, 0: as head / 1: as tail)
    keys = np.unique(nodes * (2 * num_relations) + pairs)
    node, pair = keys // (2 * num_relations), keys % (2 * num_relations)
    topic_pairs = np.unique(pair[np.isin(node, topic_local)])
    shared = np.bincount(node[np.isin(pair, topic_pairs)], minlength=n)
    union = np.bincount(node, minlength=n) + topic_pairs.size - shared
    return shared, np.maximum(union, 1)


def topic_facts(index, split: str, i: int, n: int) -> list[list[str]]:
    """Up to ``n`` triples of question ``i``'s graph (row order) that touch a topic entity and
    whose other end has a name: what the model may ground its questions in."""
    if n <= 0:
        return []
    g = index[split].graph(i)
    topic = g.topic_mask.numpy()
    heads, tails = g.edge_index[0].numpy(), g.edge_index[1].numpy()
    touching = np.flatnonzero(topic[heads] | topic[tails])
    out: list[list[str]] = []
    for start in range(0, len(touching), 4 * n):
        part = touching[start : start + 4 * n]
        hs = index.entities.take(g.entity_ids[heads[part]].numpy())
        ts = index.entities.take(g.entity_ids[tails[part]].numpy())
        rs = index.relations.take(g.edge_rel[part].numpy())
        keep = names_have_text(hs) & names_have_text(ts)
        out.extend([h, r, t] for h, r, t, k in zip(hs, rs, ts, keep) if k)
        if len(out) >= n:
            break
    return out[:n]


def _normal(question: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", question.lower()).split())


def parse_questions(
    text: str,
    requested: Sequence[str],
    entities: Sequence[str],
    require_question_mark: bool = True,
    require_entity: bool = True,
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The kept ``{category: question}`` (one per requested category, first wins) and the rejected
    lines ``{"line", "reason"}`` (reasons: `REJECT_REASONS`) of an answer. Blank lines and
    list markers (``1.``, ``-``) and ``**`` emphasis are ignored."""
    kept: dict[str, str] = {}
    seen: set[str] = set()
    rejected: list[dict[str, str]] = []
    lowered = [e.lower() for e in entities]
    for raw in text.splitlines():
        line = split_marker(raw.replace("**", ""))[1].strip()
        if not line:
            continue
        m = _LABELLED.match(line)
        category = category_of(m.group(1)) if m else None
        question = m.group(2).strip() if m else ""
        if m is None:
            reason = "unparsed"
        elif category is None:
            reason = "unknown_category"
        elif not question:
            reason = "empty"
        elif category not in requested:
            reason = "not_requested"
        elif require_question_mark and not question.endswith("?"):
            reason = "no_question_mark"
        elif require_entity and not any(e in question.lower() for e in lowered):
            reason = "no_entity_named"
        elif _normal(question) in seen:
            reason = "duplicate"
        elif category in kept:
            reason = "over_limit"
        else:
            kept[category] = question
            seen.add(_normal(question))
            continue
        rejected.append({"line": line, "reason": reason})
    return kept, rejected


def _category_lines() -> str:
    """OKGQA's categories as the prompt lists them: what each asks for, with its template."""
    return "\n".join(
        f"- {name}: {what}. Example: {TEMPLATES[name].format(entity='[entity]', other='[other entity]')}"
        for name, what in CATEGORIES.items()
    )


_COUNT_ORDER = (
    "graphs_answered",
    "questions_kept",
    "lines_rejected",
    "graphs_without_question",
    "graphs_without_named_entity",
    "graphs_without_category",
    "comparative_passed_over",
)


def _options(cfg: dict) -> tuple[tuple[str, ...], int]:
    types = check_types(cfg.get("types") or (), "llm_open_questions: types")
    per_graph = int(cfg.get("per_graph", 1))
    if per_graph < 1:
        raise ValueError(f"llm_open_questions: per_graph must be at least 1, got {per_graph}")
    return types, per_graph


def _graphs(cfg: dict) -> tuple[Any, str, list[int]]:

    folder = data_dir(cfg)
    if not folder:
        raise ValueError("llm_open_questions: set data.dir=<RoG folder / hub name> (questions and graphs)")
    split = cfg.get("split", "test")
    index = get_index(folder, splits=(split,), cache_dir=cfg.get("cache_dir"))
    return index, split, window(list(range(len(index[split]))), cfg)


def _request(prompts: Prompts, g: GraphEntities, facts: list[list[str]], asked: list[str]) -> ChatRequest:
    lines = "\n".join(f"({h}, {r}, {t})" for h, r, t in facts) or "none available"
    return prompts.request(
        g.graph_id,
        categories=_category_lines(),
        entities=", ".join(g.topics),
        related=", ".join(g.related) or "none",
        facts=lines,
        types=", ".join(asked),
        num_questions=len(asked),
    )


def _answer(
    cfg: dict, g: GraphEntities, asked: list[str], res: ChatResult, counts: Counter, reasons: Counter
) -> tuple[list[dict], dict]:
    """One answered graph: its question rows and its responses row, counted."""
    kept, rejected = parse_questions(
        res.text or "",
        asked,
        g.topics,
        require_question_mark=bool(cfg.get("require_question_mark", True)),
        require_entity=bool(cfg.get("require_entity", True)),
    )
    reasons.update(x["reason"] for x in rejected)
    rows = []
    for t in asked:  # request order, whatever order the model answered in
        if t in kept:
            q = kept[t]
            named = [e for e in g.related if e.lower() in q.lower() and e not in g.topics]
            question = OpenQuestion(f"{g.graph_id}/llm-{t}", g.graph_id, q, t, [*g.topics, *named], source="llm")
            rows.append({**question.to_row(), "raw_response": res.text, "request_key": res.key})
            counts[f"kept_{t}"] += 1
    counts["graphs_answered"] += 1
    counts["questions_kept"] += len(rows)
    counts["lines_rejected"] += len(rejected)
    counts["graphs_without_question"] += not rows
    response = {
        "graph_id": g.graph_id,
        "types": asked,
        "questions": kept,
        "rejected": rejected,
        "raw_response": res.text,
        "request_key": res.key,
    }
    return rows, response


def run(cfg: Mapping[str, Any], client: ChatClient | None = None) -> dict:
    """Run the step from a config (see ``conf/prep/llm_open_questions.yaml``); returns the summary."""
    cfg = to_container(cfg)
    types, per_graph = _options(cfg)
    index, split, positions = _graphs(cfg)
    counts: Counter = Counter()
    max_related, num_facts = int(cfg.get("max_related", 3)), int(cfg.get("num_facts", 15))
    prompts = Prompts(cfg, "open_questions")
    graphs: list[tuple[GraphEntities, list[str]]] = []
    for i in positions:
        g = graph_entities(index, split, i, max_related)
        if not g.topics:
            counts["graphs_without_named_entity"] += 1
            continue
        asked, passed = assign_types(i, per_graph, types, g.other is not None)
        counts["comparative_passed_over"] += passed
        if not asked:  # only comparative was asked, and there is nothing to compare with
            counts["graphs_without_category"] += 1
            continue
        graphs.append((g, asked))
    requests = [_request(prompts, g, topic_facts(index, split, g.position, num_facts), asked) for g, asked in graphs]
    by_id = {g.graph_id: (g, asked) for g, asked in graphs}
    responses_path = companion(cfg["output"], ".responses.jsonl.gz")
    with open_step("llm_open_questions", cfg, client, reuse_from=responses_path) as step:
        answered, skipped = ask_answers(step, [g.graph_id for g, _ in graphs], requests)
        rows, responses = [], []
        reasons: Counter = Counter()
        for gid, res in answered:
            got, response = _answer(cfg, *by_id[gid], res, counts, reasons)
            rows.extend(got)
            responses.append(response)
        ordered = ordered_counts(counts, {"graphs": len(positions), "requests": len(requests)}, _COUNT_ORDER)
        ordered.update({f"rejected_{r}": reasons[r] for r in REJECT_REASONS})
        note_skipped(ordered, skipped, "skipped_graphs")
        ordered["types"] = list(types)
        ordered["responses_file"] = str(responses_path)
        return step.finish(rows, ordered, extra_outputs={responses_path: responses}, config=cfg)
