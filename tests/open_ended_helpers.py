"""A scripted OpenAI-compatible judge for the open-ended tests: every answer is a function of the
prompt, so every figure of a run is known exactly.

* reader: with evidence, one sentence per evidence line (the triple stated: supported); closed
  book, two sentences about the topic that no graph holds (unsupported);
* atomic facts: the answer's sentences as ``- `` lines, or prose (unparseable) for a question
  that says ``prose``;
* fact verifier: ``True`` when every word of the fact is in the knowledge lines, with the first
  token's log-probabilities (P(True) 0.9 or 0.1);
* G-Eval: ``correctness`` with log-probabilities (``4`` at 0.8, ``5`` at 0.2: 4.2), every other
  criterion ``3`` with log-probabilities that hold no rating (so ``auto`` samples), ``empowerment``
  of a closed-book answer malformed JSON.
"""

from __future__ import annotations

import math
import re

from gsr_train.llm.server import Generation

CLOSED_BOOK = "{topic} was born on the Moon. {topic} won seven Olympic medals."


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def _logprobs(pairs: list[tuple[str, float]]) -> list[dict]:
    tops = [{"token": t, "logprob": math.log(p)} for t, p in pairs]
    return [{"token": pairs[0][0], "logprob": tops[0]["logprob"], "top_logprobs": tops}]


def _gen(text: str, logprobs: list[dict] | None = None) -> Generation:
    return Generation(text, 10, len(text.split()), "stop", logprobs)


def judge(messages: list[dict], params: dict) -> Generation | str:
    system, user = messages[0]["content"], messages[-1]["content"]
    if "Answer the user's question in one paragraph" in system:
        question = user.split("Question:", 1)[1].split("\n", 1)[0].strip()
        if "Knowledge graph facts:" not in user:
            topic = question.split(" about ", 1)[-1].rstrip("?").strip() if " about " in question else "It"
            return CLOSED_BOOK.format(topic=topic)
        lines = re.findall(r"^\((.+?), (.+?), (.+?)\)$", user, flags=re.M)
        if not lines:  # paths or a subgraph table: its first line, stated
            first = user.split("Knowledge graph facts:", 1)[1].strip().splitlines()[0]
            return f"The graph shows {first.replace(' -> ', ' ').replace(',', ' ')}."
        return " ".join(f"{h} {r.split('.')[-1].replace('_', ' ')} {t}." for h, r, t in lines[:2])
    if "atomic facts" in system:
        text = user.rsplit("Text:", 1)[1].split("Atomic facts:", 1)[0].strip()
        if "prose" in text:
            return "This text says several things."
        return "\n".join(f"- {s.strip()}." for s in text.split(".") if s.strip())
    if "supported by knowledge graph triples" in system:
        knowledge = user.split("Fact:", 1)[0]
        fact = user.split("Fact:", 1)[1].split("\n", 1)[0]
        ok = _words(fact) <= _words(knowledge)
        return _gen(
            "True" if ok else "False",
            _logprobs([("True", 0.9), ("False", 0.1)] if ok else [("False", 0.9), ("True", 0.1)]),
        )
    if "You are an evaluator" in system:
        asked = bool(params.get("logprobs"))
        if "Correctness (1-5)" in user:
            return _gen("4", _logprobs([("4", 0.8), ("5", 0.2)]) if asked else None)
        if "Empowerment (1-5)" in user and "Knowledge:\n(none)" in user:
            return _gen('{"rating": 4', _logprobs([("{", 1.0)]) if asked else None)
        return _gen("3", _logprobs([("The", 1.0)]) if asked else None)  # no rating among them: sampled
    return "unexpected prompt"
