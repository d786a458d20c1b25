"""Patterns from an LLM: SimGRAG's JSON triple pattern and SAFE's typed pseudo query graph.

Prompts are the packaged ``prompts/simgrag_*.txt`` / ``prompts/safe_*.txt`` (few-shot, in
the papers' formats; override with any file). Answers are parsed leniently (fenced JSON,
Python-style tuples and single quotes) but validated strictly: a pattern must be a connected
graph with at least one edge and no self-loop, and every failure is counted by reason with
examples (``LLMPatternStats``), never silently dropped. The raw answers stay in the client's
SQLite cache, so a re-run costs nothing.

SimGRAG format: ``{"divided": [...], "triples": [[h, r, t], ...]}``; names starting with
``UNKNOWN`` are unknown nodes (``UNKNOWN person 1`` -> type "person") or relations.
SAFE format: ``{"plan", "nodes": {name: type}, "edges": [[s, p, t], ...]}``; ``unk1``... are
unknown nodes, ``p1||p2`` is a two-hop relation through an unknown intermediate (CVT) node.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gsr_train.kg.schema import relation_domain
from gsr_train.llm.client import ChatRequest
from gsr_train.llm.parsing import extract_json
from gsr_train.llm.prompts import load_prompt, messages
from gsr_train.patterns.pattern import Pattern, PatternEdge, PatternNode

KINDS = ("simgrag", "safe")
_UNKNOWN = re.compile(r"^\s*unknown\b\s*(.*?)\s*(\d+)?\s*$", re.I)
_UNK = re.compile(r"^\s*unk\s*\d+\s*$", re.I)


class PatternParseError(ValueError):
    """The answer holds no usable pattern; ``reason`` is a short category for counting."""

    def __init__(self, reason: str, detail: str = ""):
        self.reason = reason
        super().__init__(f"{reason}{': ' + detail if detail else ''}")


def _load_object(text: str) -> Any:
    obj = extract_json(text)
    if obj is not None:
        return obj
    a, b = text.find("{"), text.rfind("}")
    if a >= 0 and b > a:
        try:
            return ast.literal_eval(text[a : b + 1])
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    raise PatternParseError("no JSON object", text[:80])


def _triples(value: Any) -> list[tuple[str, str, str]]:
    if not isinstance(value, (list, tuple)) or not value:
        raise PatternParseError("no triples")
    out = []
    for item in value:
        if (
            isinstance(item, (list, tuple))
            and len(item) == 2
            and isinstance(item[0], (list, tuple))
            and len(item[0]) == 3
        ):  # [[s, p, t], "description"]
            item = item[0]
        if not (
            isinstance(item, (list, tuple)) and len(item) == 3 and all(isinstance(x, str) and x.strip() for x in item)
        ):
            raise PatternParseError("malformed triple", repr(item)[:80])
        out.append(tuple(x.strip() for x in item))
    return out


def _build(nodes: dict[str, PatternNode], edges: list[tuple[str, str | None, str]], source: str) -> Pattern:
    names = list(nodes)
    pos = {n: i for i, n in enumerate(names)}
    try:
        return Pattern(
            tuple(nodes[n] for n in names), tuple(PatternEdge(pos[h], pos[t], r) for h, r, t in edges), source=source
        )
    except ValueError as e:
        reason = "disconnected" if "not connected" in str(e) else "self-loop" if "self-loop" in str(e) else "invalid"
        raise PatternParseError(reason, str(e)) from None


def parse_simgrag(text: str) -> Pattern:
    """SimGRAG's ``{"divided", "triples"}`` answer as a pattern."""
    obj = _load_object(text)
    if not isinstance(obj, dict) or "triples" not in obj:
        raise PatternParseError("no triples")
    nodes: dict[str, PatternNode] = {}
    edges = []
    for h, r, t in _triples(obj["triples"]):
        for name in (h, t):
            if name not in nodes:
                m = _UNKNOWN.match(name)
                nodes[name] = PatternNode(type=(m.group(1) or None)) if m else PatternNode(text=name)
        edges.append((h, None if _UNKNOWN.match(r) else r, t))
    return _build(nodes, edges, "llm")


def parse_safe(text: str) -> Pattern:
    """SAFE's typed pseudo query graph as a pattern (``p1||p2`` becomes two edges via a CVT)."""
    obj = _load_object(text)
    if not isinstance(obj, dict) or "edges" not in obj:
        raise PatternParseError("no edges")
    declared = obj.get("nodes") or {}
    if not isinstance(declared, Mapping):
        raise PatternParseError("nodes is not an object")
    nodes: dict[str, PatternNode] = {}

    def node(name: str) -> None:
        if name not in nodes:
            ty = declared.get(name)
            ty = ty.strip() if isinstance(ty, str) and ty.strip() else None
            nodes[name] = PatternNode(type=ty) if _UNK.match(name) else PatternNode(text=name, type=ty)

    edges = []
    for s, p, t in _triples(obj["edges"]):
        node(s)
        node(t)
        hops = [x.strip() for x in p.split("||") if x.strip()]
        if not hops:
            raise PatternParseError("malformed triple", p)
        prev = s
        for j, rel in enumerate(hops):
            if j == len(hops) - 1:
                nxt = t
            else:
                nxt = f"__cvt{len(nodes)}"
                nodes[nxt] = PatternNode(type=relation_domain(hops[j + 1]))
            edges.append((prev, None if _UNKNOWN.match(rel) else rel, nxt))
            prev = nxt
    return _build(nodes, edges, "llm")


PARSERS = {"simgrag": parse_simgrag, "safe": parse_safe}


@dataclass
class LLMPatternStats:
    requests: int = 0
    parsed: int = 0
    failed_requests: int = 0  # no answer after retries (on_error=skip)
    parse_errors: Counter = field(default_factory=Counter)
    examples: list = field(default_factory=list)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["parse_errors"] = dict(self.parse_errors)
        return d


def pattern_requests(
    questions: Sequence[tuple[str, str]], kind: str, system: str | None = None, user: str | None = None
):
    """One chat request per ``(id, question)`` with the kind's few-shot prompt."""
    if kind not in KINDS:
        raise ValueError(f"pattern kind must be one of {KINDS}, got {kind!r}")
    sys_t = load_prompt(system or f"{kind}_system")
    user_t = load_prompt(user or f"{kind}_user")
    return [ChatRequest(qid, messages(sys_t, user_t, f"{kind} prompt", question=q)) for qid, q in questions]


def llm_patterns(
    client,
    questions: Sequence[tuple[str, str]],
    kind: str,
    system: str | None = None,
    user: str | None = None,
    stats: LLMPatternStats | None = None,
) -> list[list[Pattern]]:
    """Ask the LLM once per question; ``[pattern]`` where the answer parses, ``[]`` otherwise."""
    stats = stats if stats is not None else LLMPatternStats()
    parse = PARSERS[kind] if kind in PARSERS else None
    requests = pattern_requests(questions, kind, system, user)
    results = client.run(requests)
    out: list[list[Pattern]] = []
    for (qid, _), res in zip(questions, results):
        stats.requests += 1
        if res.text is None:  # not res.ok
            stats.failed_requests += 1
            out.append([])
            continue
        if parse is None:
            raise ValueError(f"no pattern parser for kind {kind!r} (known: {sorted(PARSERS)})")
        try:
            out.append([parse(res.text)])
            stats.parsed += 1
        except PatternParseError as e:
            stats.parse_errors[e.reason] += 1
            if len(stats.examples) < 10:
                stats.examples.append(f"{qid}: {e} (answer: {res.text[:120]!r})")
            out.append([])
    return out
