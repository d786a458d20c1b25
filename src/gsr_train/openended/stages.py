"""The LLM stages of the open-ended evaluation, each one batch of chat requests through the cached
client: long-form answers, atomic facts, the LLM fact verifier and G-Eval.

Every stage returns its values keyed like its inputs, plus a `collections.Counter` keyed
``(condition, reason)`` of what could not be scored and why (``request_failed`` when the client skipped a request under
``on_error: skip``, and the parsers' reasons), so nothing unreadable is scored as 0 or 1. All
answers go through the response cache, so a killed run asks again only what was not answered.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gsr_train.llm.client import ChatClient, ChatRequest, ChatResult
from gsr_train.llm.prompts import load_prompt, messages
from gsr_train.openended.parsing import Parsed, parse_facts, parse_rating, parse_verdict

CRITERIA = ("context_relevance", "comprehensiveness", "correctness", "empowerment")
CRITERION_NAMES = {
    "context_relevance": "Context relevance",
    "comprehensiveness": "Comprehensiveness",
    "correctness": "Correctness",
    "empowerment": "Empowerment",
}


@dataclass
class Case:
    """One answer to judge: a question under one condition (retrieval form, perturbation)."""

    key: str  # "<question id>|<condition>"
    question: str
    evidence: list[str]  # the lines the reader saw ([] = closed book)
    answer: str | None = None
    facts: list[str] = field(default_factory=list)


def condition_of(key: str) -> str:
    """The condition a request or case key belongs to (``"<question>|<condition>|..."``)."""
    return key.split("|")[1] if "|" in key else ""


def _run(client: ChatClient, requests: Sequence[ChatRequest]) -> list[ChatResult]:
    return client.run(requests) if requests else []


def _knowledge_block(lines: Sequence[str]) -> str:
    return "\n".join(lines) if lines else "(none)"


def answer(
    client: ChatClient, cases: Sequence[Case], max_tokens: int, params: Mapping[str, Any] | None = None
) -> Counter:
    """Fill ``case.answer`` with a one-paragraph answer (closed book when ``case.evidence`` is empty)."""
    system, user, closed = (load_prompt(n) for n in ("long_form_system", "long_form_user", "long_form_closed_user"))
    requests = [
        ChatRequest(
            c.key,
            messages(
                system,
                user if c.evidence else closed,
                f"answer {c.key}",
                question=c.question,
                evidence="\n".join(c.evidence),
            ),
            {"max_tokens": max_tokens, **dict(params or {})},
        )
        for c in cases
    ]
    counts: Counter = Counter()
    for c, res in zip(cases, _run(client, requests)):
        if res.text is None:
            counts[condition_of(c.key), "request_failed"] += 1
        elif not res.text.strip():
            counts[condition_of(c.key), "empty_answer"] += 1
        else:
            c.answer = res.text.strip()
    return counts


def sentences(text: str) -> list[str]:
    """The complete sentences of an answer, each once: an answer cut by ``max_tokens`` ends in half a
    sentence, and a small model repeats itself."""
    parts = [p.strip() for p in re.split(r"(?<=[.!?])\s+", text.strip()) if p.strip()]
    if parts and not parts[-1].endswith((".", "!", "?")):
        parts = parts[:-1]
    return list(dict.fromkeys(parts))


def split_facts(
    client: ChatClient, cases: Sequence[Case], max_tokens: int, max_facts: int, mode: str = "llm"
) -> Counter:
    """Fill ``case.facts`` with the atomic facts of ``case.answer`` (answered cases only).

    As FActScore does, the answer is cut into sentences first; ``llm`` then asks the model to break
    each sentence into atomic facts (one request per sentence, up to ``max_facts`` sentences),
    ``sentences`` takes each sentence as one fact (no LLM: cheap, coarser).
    """
    if mode not in ("llm", "sentences"):
        raise ValueError(f"open_ended.facts: {mode!r} is not llm or sentences")
    counts: Counter = Counter()
    todo = []
    for c in cases:
        if not c.answer:
            continue
        sents = sentences(c.answer)[:max_facts]
        if not sents:
            counts[condition_of(c.key), "no_complete_sentence"] += 1
        todo += [(c, i, sent) for i, sent in enumerate(sents)]
    if mode == "sentences":
        for c, _, sent in todo:
            if len(sent.split()) >= 3:
                c.facts.append(sent)
        return counts
    system, user = load_prompt("atomic_facts_system"), load_prompt("atomic_facts_user")
    demo = set(parse_facts(user.split("Text: $answer", 1)[0], 100)[0])  # the prompt's own example
    requests = [
        ChatRequest(f"{c.key}|s{i}", messages(system, user, f"facts {c.key}", answer=sent), {"max_tokens": max_tokens})
        for c, i, sent in todo
    ]
    for (c, _, _), res in zip(todo, _run(client, requests)):
        cond = condition_of(c.key)
        if res.text is None:
            counts[cond, "request_failed"] += 1
            continue
        facts, reason, dropped = parse_facts(res.text, max_facts)
        copied = [f for f in facts if f in demo]
        counts[cond, "facts_dropped"] += dropped
        counts[cond, "copied_example"] += len(copied)
        if reason:
            counts[cond, reason] += 1
        room = max_facts - len(c.facts)
        c.facts += [f for f in facts if f not in demo and f not in c.facts][:room]
    return counts


def verify_llm(
    client: ChatClient, pairs: Sequence[tuple[str, str, Sequence[str]]], max_tokens: int = 3
) -> tuple[list[Parsed], Counter]:
    """The LLM judge on ``(request id, fact, knowledge lines)``: ``Parsed.value`` is the probability
    that the fact is supported (see `gsr_train.openended.parsing.parse_verdict`)."""
    system, user = load_prompt("verify_fact_system"), load_prompt("verify_fact_user")
    params = {"max_tokens": max_tokens, "logprobs": True, "top_logprobs": 20}
    requests = [
        ChatRequest(rid, messages(system, user, f"verify {rid}", fact=fact, knowledge=_knowledge_block(lines)), params)
        for rid, fact, lines in pairs
    ]
    out: list[Parsed] = []
    counts: Counter = Counter()
    for (rid, _, _), res in zip(pairs, _run(client, requests)):
        parsed = Parsed(None, "request_failed") if res.text is None else parse_verdict(res.text, res.body)
        counts[condition_of(rid), parsed.reason or f"verdict_by_{parsed.method}"] += 1
        out.append(parsed)
    return out, counts


@dataclass
class GEvalOptions:
    criteria: Sequence[str] = CRITERIA
    method: str = "auto"  # auto | logprobs | samples
    samples: int = 5
    temperature: float = 1.0
    max_tokens: int = 3
    knowledge_lines: int = 30


def _geval_request(rid: str, case: Case, criterion: str, params: Mapping[str, Any]) -> ChatRequest:
    text = messages(
        load_prompt("geval_system"),
        load_prompt("geval_user"),
        f"geval {rid}",
        criterion=load_prompt(f"geval_{criterion}"),
        name=CRITERION_NAMES[criterion],
        question=case.question,
        knowledge=_knowledge_block(case.evidence),
        answer=case.answer or "",
    )
    return ChatRequest(rid, text, dict(params))


def _sampled_ratings(
    client: ChatClient, items: Sequence[tuple[Case, str]], opts: GEvalOptions, counts: Counter
) -> dict:
    """Each item's mean over ``opts.samples`` sampled ratings (distinct seeds) that parse; every sample
    that does not is counted ``samples_<reason>``."""
    n = opts.samples
    params = {"max_tokens": opts.max_tokens, "temperature": opts.temperature}
    requests = [
        _geval_request(f"{c.key}|{crit}|s{i}", c, crit, {**params, "seed": i}) for c, crit in items for i in range(n)
    ]
    results = _run(client, requests)
    out = {}
    for j, (c, crit) in enumerate(items):
        parsed = [
            Parsed(None, "request_failed") if r.text is None else parse_rating(r.text, None)
            for r in results[j * n : (j + 1) * n]
        ]
        values = [p.value for p in parsed if p.value is not None]
        for p in parsed:
            if p.reason:
                counts[condition_of(c.key), f"samples_{p.reason}"] += 1
        out[(c.key, crit)] = (
            Parsed(sum(values) / len(values), None, "samples")
            if values
            else Parsed(None, next((p.reason for p in parsed if p.reason), "no_rating"), "samples")
        )
    return out


def _has_logprobs(body: dict | None) -> bool:
    try:
        return bool(body["choices"][0]["logprobs"]["content"])  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        return False


def geval(
    client: ChatClient, cases: Sequence[Case], opts: GEvalOptions
) -> tuple[dict[tuple[str, str], Parsed], Counter]:
    """G-Eval ratings per ``(case key, criterion)`` of the answered cases.

    ``logprobs``: one request asking for the first token's top log-probabilities, the rating their
    probability-weighted mean. ``samples``: ``samples`` requests at ``temperature`` (distinct
    seeds), the rating the mean of those that parse. ``auto``: log-probabilities where the
    endpoint returns them, else samples. ``Parsed.method`` records which one gave each rating.
    """
    bad = [c for c in opts.criteria if c not in CRITERIA]
    if bad:
        raise ValueError(f"open_ended.geval.criteria: unknown {bad} (known: {', '.join(CRITERIA)})")
    todo = [(c, crit) for c in cases if c.answer for crit in opts.criteria]
    out: dict[tuple[str, str], Parsed] = {}
    counts: Counter = Counter()
    need_samples = list(todo)
    if opts.method in ("auto", "logprobs") and todo:
        params = {"max_tokens": opts.max_tokens, "logprobs": True, "top_logprobs": 20}
        requests = [_geval_request(f"{c.key}|{crit}", c, crit, params) for c, crit in todo]
        results = _run(client, requests[:1])  # one probe: does this endpoint return log-probabilities?
        if opts.method == "logprobs" or _has_logprobs(results[0].body):
            results += _run(client, requests[1:])
        need_samples = []
        for (c, crit), res in zip(todo, results):
            parsed = Parsed(None, "request_failed") if res.text is None else parse_rating(res.text, res.body)
            if parsed.method != "logprobs" and opts.method == "auto" and res.text is not None:
                need_samples.append((c, crit))  # no usable log-probabilities: sample instead
                continue
            out[(c.key, crit)] = parsed
        need_samples += todo[len(results) :]  # the endpoint returns none: every other item sampled
    if need_samples:
        out.update(_sampled_ratings(client, need_samples, opts, counts))
    for (key, _), p in out.items():
        counts[condition_of(key), p.reason or f"rated_by_{p.method}"] += 1
    return out, counts
