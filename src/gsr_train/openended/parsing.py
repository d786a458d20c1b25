"""Reading the judges' answers: atomic-fact lists, True/False verdicts and 1-5 ratings.

Every parser returns what it read and, when it read nothing usable, the *reason* (a count key of
the run's summary), so a judge that answers badly is counted per reason and never silently scored
as 0 or 1. Log-probabilities (OpenAI's ``choices[0].logprobs.content``) are read when the
endpoint returns them: the rating is then the probability-weighted mean (G-Eval), the verdict's
score the probability of "True".
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from gsr_train.llm.parsing import extract_json, split_marker

_TRUE = ("true", "yes", "supported")
_FALSE = ("false", "no", "unsupported", "not")
_MIN_FACT_WORDS = 3


@dataclass(frozen=True)
class Parsed:
    """What a parser read (``value``) or why it read nothing (``reason``)."""

    value: Any = None
    reason: str | None = None
    method: str = "text"  # text | logprobs


def parse_facts(text: str | None, max_facts: int) -> tuple[list[str], str | None, int]:
    """``(facts, reason, dropped)``: one fact per list line (``- ``, ``1.``) or a JSON list of strings.

    Lines without a list marker are not facts (a model's preamble, a repeated answer); a text
    with no list line at all is ``unparseable_facts``; facts under three words are dropped and
    counted; ``max_facts`` caps the list.
    """
    if text is None or not text.strip():
        return [], "empty_fact_list", 0
    obj = extract_json(text) if text.lstrip().startswith(("[", "{", "```")) else None
    if isinstance(obj, dict):
        obj = obj.get("facts")
    if isinstance(obj, list) and all(isinstance(x, str) for x in obj):
        items = [x.strip() for x in obj]
    else:
        items = []
        for line in text.splitlines():
            number, rest = split_marker(line)
            if rest and (number is not None or line.lstrip().startswith(("-", "*", "•"))):
                items.append(rest.strip())
        if not items:
            return [], "unparseable_facts", 0
    facts = list(dict.fromkeys(x for x in items if len(x.split()) >= _MIN_FACT_WORDS))
    dropped = len(items) - len(facts)
    if not facts:
        return [], "no_facts", dropped
    return facts[:max_facts], None, dropped + max(0, len(facts) - max_facts)


def _first_token_logprobs(body: dict | None) -> list[dict] | None:
    """The top log-probabilities of the first generated token that is not whitespace, if returned."""
    try:
        content = body["choices"][0]["logprobs"]["content"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        return None
    for step in content or []:
        if str(step.get("token", "")).strip():
            tops = step.get("top_logprobs") or [step]
            return [t for t in tops if isinstance(t, dict) and "token" in t and "logprob" in t]
    return None


def _verdict_word(token: str) -> bool | None:
    word = re.sub(r"[^a-z]", "", token.lower())
    if not word:
        return None
    if word in _TRUE or (len(word) >= 2 and any(w.startswith(word) for w in ("true", "supported"))):
        return True
    if word in _FALSE or (len(word) >= 2 and "false".startswith(word)):
        return False
    return None


def parse_verdict(text: str | None, body: dict | None = None) -> Parsed:
    """``value``: the probability that the fact is supported (from the first token's log-probabilities
    when returned, else 1.0 / 0.0 from the first word); ``reason`` ``no_verdict`` otherwise."""
    tops = _first_token_logprobs(body)
    if tops:
        p_true = sum(math.exp(t["logprob"]) for t in tops if _verdict_word(t["token"]) is True)
        p_false = sum(math.exp(t["logprob"]) for t in tops if _verdict_word(t["token"]) is False)
        if p_true + p_false > 0:
            return Parsed(p_true / (p_true + p_false), None, "logprobs")
    words = re.findall(r"[A-Za-z]+", text or "")
    if not words:
        return Parsed(None, "empty_verdict" if not (text or "").strip() else "no_verdict")
    first = _verdict_word(words[0])
    if first is None and words[0].lower() == "answer" and len(words) > 1:  # "Answer: True"
        first = _verdict_word(words[1])
    if first is None:
        return Parsed(None, "no_verdict")
    return Parsed(1.0 if first else 0.0)


def parse_rating(text: str | None, body: dict | None = None, scale: int = 5) -> Parsed:
    """A 1..``scale`` rating: the probability-weighted mean over the first token's top log-probabilities
    when they hold a rating (G-Eval), else the number written (a bare integer, or ``{"rating": n}``).

    Reasons: ``empty_rating``, ``malformed_json`` (a JSON object that does not parse or has no
    rating), ``no_rating`` (no integer in range).
    """
    tops = _first_token_logprobs(body)
    if tops:
        weights: dict[int, float] = {}
        for t in tops:
            tok = str(t["token"]).strip()
            if tok.isdigit() and 1 <= int(tok) <= scale:
                weights[int(tok)] = weights.get(int(tok), 0.0) + math.exp(t["logprob"])
        total = sum(weights.values())
        if total > 0:
            return Parsed(sum(k * w for k, w in weights.items()) / total, None, "logprobs")
    raw = (text or "").strip()
    if not raw:
        return Parsed(None, "empty_rating")
    if raw.startswith(("{", "```")):
        try:
            obj = json.loads(raw.strip("`").removeprefix("json").strip())
        except json.JSONDecodeError:
            return Parsed(None, "malformed_json")
        value = next((obj.get(k) for k in ("rating", "score") if isinstance(obj, dict) and k in obj), None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 1 <= value <= scale:
            return Parsed(float(value))
        return Parsed(None, "malformed_json")
    m = re.search(r"(?<![\d.])(\d+)(?:\s*/\s*\d+)?(?![\d.])", raw)
    if m is None or not 1 <= int(m.group(1)) <= scale:
        return Parsed(None, "no_rating")
    return Parsed(float(m.group(1)))
