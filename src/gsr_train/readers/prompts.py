"""Reader prompts built from retrieval results, in registered formats, within a token budget.

A format (``qa.format``) is an object (`PromptFormat`): how an evidence line looks, the
instruction, an optional in-context example, the target the reader is trained to write, and how
its answers are read back. Registered (`FORMATS`, `register_format`):

* ``paths`` (`PathsFormat`): GSR's "subgraph as reasoning paths" (the RoG prompt style):
  the evidence is a list of ``e0 -> r1 -> e1 <- r2 <- e2`` paths (the ``paths`` field of a GSR
  results row; rows without paths show each retrieved triple as a one-hop path); the answer is
  one entity per line.
* ``triples`` (`TriplesFormat`): GSR's "subgraph as triple set": de-duplicated
  ``(h, r, t)`` lines, one answer per line.
* ``subgraphrag`` (`SubgraphRAGFormat`): SubgraphRAG's prompt: the scored top-K triples
  ``(h,r,t)``, one in-context example (user + assistant turn), answers as lines ``ans: ...``.

Evidence is best first (results rows are written that way; rows with ``scores`` are sorted
again, stably). ``k`` caps the number of evidence lines (``k = 0``: no evidence, the
closed-book baseline). The token budget ``max_prompt_tokens`` covers the whole chat-templated
prompt: the template overhead is measured once, every evidence line of every question is
tokenised in one batched call, and per question the longest best-first prefix that fits is
kept, so the lowest-scored evidence is dropped first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gsr_train.eval.qa import normalize_answer
from gsr_train.llm.parsing import list_items, prefixed_lines
from gsr_train.plugins import Registry

CLOSED_BOOK = (
    "Please answer the given question. Please keep the answer as simple as possible and return all the "
    "possible answers as a list, one per line."
)

# SubgraphRAG's prompt carries one worked example (a user turn and an assistant turn).
ICL_TRIPLES = [
    ("Lou Seal", "sports.mascot.team", "San Francisco Giants"),
    ("San Francisco Giants", "sports.sports_team.championships", "2012 World Series"),
    ("San Francisco Giants", "sports.sports_team.championships", "2010 World Series"),
    ("San Francisco Giants", "sports.sports_team.arena_stadium", "AT&T Park"),
    ("San Francisco Giants", "sports.sports_team.championships", "2014 World Series"),
    ("San Francisco Giants", "sports.sports_team.team_mascot", "Crazy Crab"),
]
ICL_QUESTION = "What year did the team with mascot named Lou Seal win the World Series?"
ICL_ANSWER = (
    "To answer the question, we have to find the team whose mascot is Lou Seal and the World Series it won. "
    "From the triples we can see that Lou Seal is the mascot of the San Francisco Giants, which won the "
    "2010, 2012 and 2014 World Series. Therefore, the answers are:\n"
    "ans: 2014 World Series\nans: 2012 World Series\nans: 2010 World Series"
)


@dataclass
class ReaderExample:
    """One question ready for a reader: chat messages, target text and what the metrics need.

    Every reader's ``prepare`` gives these (a reader that needs more per question subclasses it);
    ``messages`` and ``target`` stay empty for readers that do not prompt an LLM."""

    id: str
    question: str
    messages: list[dict]
    target: str
    answers: list[str]
    in_kg: bool = True
    hops: int = -1
    evidence_shown: int = 0
    evidence_total: int = 0
    entities: list[str] = field(default_factory=list)  # entities of the evidence shown
    sources: list[str] = field(default_factory=list)  # the source of each line shown (merged evidence)

    def prompt_text(self) -> str:
        return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in self.messages)

    @classmethod
    def of(cls, question: Mapping[str, Any], **fields: Any) -> ReaderExample:
        """The example of one questions row (``id``, ``question``, ``answers``, ``in_kg``, ``hops``: what
        the metrics need), with the reader's own ``fields`` (``messages`` and ``target`` default empty)."""
        fields.setdefault("messages", [])
        fields.setdefault("target", "")
        return cls(
            id=question["id"],
            question=question["question"],
            answers=list(question["answers"]),
            in_kg=bool(question.get("in_kg", True)),
            hops=int(question.get("hops", -1)),
            **fields,
        )


# --------------------------------------------------------------------------- formats


class PromptFormat:
    """One prompt format: how evidence lines look, what the reader is asked and trained to write, and
    how its answers are read back. A new format subclasses this (or a format below), sets ``name``,
    ``header`` and ``instruction``, overrides what differs, and is registered with
    `register_format`; ``qa.format=<name>`` then picks it."""

    name: str = ""
    header: str = "Triples"  # the heading of the evidence block
    instruction: str = ""  # the system turn when evidence is shown
    closed_book: str = CLOSED_BOOK  # the system turn without evidence

    def triple_line(self, t: Sequence[str]) -> str:
        return f"({t[0]}, {t[1]}, {t[2]})"

    def lines(self, row: Mapping[str, Any], triples: list[list[str]], k: int) -> tuple[list[str], list[list[str]]]:
        """At most ``k`` best-first evidence lines of one row (``triples`` already best first) and the
        entities each mentions: the distinct triples, one per line."""
        seen: dict[str, list[str]] = {}
        for h, r, t in triples:
            line = self.triple_line((h, r, t))
            if line not in seen:
                seen[line] = [h, t]
                if len(seen) >= k:
                    break
        return list(seen), list(seen.values())

    def messages(self, question: str, lines: Sequence[str], with_evidence: bool, icl: bool) -> list[dict]:
        """The chat turns of one question; ``with_evidence=False`` asks closed-book."""
        if not with_evidence:
            return [{"role": "system", "content": self.closed_book}, self._ask(question)]
        user = f"{self.header}:\n" + "\n".join(lines) + f"\n\nQuestion:\n{question}"
        return [{"role": "system", "content": self.instruction}, *self.examples(icl), {"role": "user", "content": user}]

    def examples(self, icl: bool) -> list[dict]:
        """In-context example turns between the system turn and the question (none by default)."""
        return []

    def target(self, answers: Sequence[str]) -> str:
        """The assistant turn the reader is trained to produce: one answer per line."""
        return "\n".join(answers)

    def items(self, text: str) -> list[str]:
        """The answer items of a response (before de-duplication): one per list line, headings dropped."""
        return [i for i in list_items(text) if not i.rstrip().endswith(":")]

    @staticmethod
    def _ask(question: str) -> dict:
        return {"role": "user", "content": f"Question:\n{question}"}


class TriplesFormat(PromptFormat):
    """GSR's "subgraph as triple set": de-duplicated ``(h, r, t)`` lines, one answer per line."""

    name = "triples"
    instruction = (
        "Based on the triples, please answer the given question. Please keep the answer as simple as "
        "possible and return all the possible answers as a list, one per line."
    )


class PathsFormat(PromptFormat):
    """GSR's "subgraph as reasoning paths" (RoG's style): ``e0 -> r1 -> e1 <- r2 <- e2`` lines from a
    row's ``paths`` (rows without paths show each triple as a one-hop path), one answer per line."""

    name = "paths"
    header = "Reasoning Paths"
    instruction = (
        "Based on the reasoning paths, please answer the given question. Please keep the answer as simple "
        "as possible and return all the possible answers as a list, one per line."
    )

    def lines(self, row: Mapping[str, Any], triples: list[list[str]], k: int) -> tuple[list[str], list[list[str]]]:
        paths = row.get("paths")
        if paths:
            lines = list(dict.fromkeys(str(p) for p in paths))[:k]
            return lines, [[s.strip() for s in _path_entities(p)] for p in lines]
        lines = list(dict.fromkeys(f"{h} -> {r} -> {t}" for h, r, t in triples))[:k]
        return lines, [[p.split(" -> ")[0], p.split(" -> ")[-1]] for p in lines]


class SubgraphRAGFormat(PromptFormat):
    """SubgraphRAG's prompt: the scored top-K triples ``(h,r,t)``, one in-context example (a user and
    an assistant turn, ``qa.icl``), answers as lines ``ans: ...``."""

    name = "subgraphrag"
    instruction = (
        "Based on the triples retrieved from a knowledge graph, please answer the question. Please "
        'return formatted answers as a list, each prefixed with "ans:".'
    )
    closed_book = 'Please answer the question. Please return formatted answers as a list, each prefixed with "ans:".'

    def triple_line(self, t: Sequence[str]) -> str:
        return f"({t[0]},{t[1]},{t[2]})"

    def examples(self, icl: bool) -> list[dict]:
        if not icl:
            return []
        example = (
            f"{self.header}:\n" + "\n".join(self.triple_line(t) for t in ICL_TRIPLES) + f"\n\nQuestion:\n{ICL_QUESTION}"
        )
        return [{"role": "user", "content": example}, {"role": "assistant", "content": ICL_ANSWER}]

    def target(self, answers: Sequence[str]) -> str:
        return "\n".join(f"ans: {a}" for a in answers) if answers else "ans: not available"

    def items(self, text: str) -> list[str]:
        return prefixed_lines(text, "ans")


FORMATS: Registry[PromptFormat] = Registry("prompt format", error=ValueError)


def register_format(cls: type[PromptFormat]) -> type[PromptFormat]:
    """Class decorator (or call): make ``qa.format=<cls.name>`` pick this format (one instance each)."""
    if not cls.name:
        raise ValueError(f"{cls.__name__}: a prompt format needs a name")
    known = FORMATS.get(cls.name)
    FORMATS.register(cls.name)(known if type(known) is cls else cls())
    return cls


for _cls in (PathsFormat, TriplesFormat, SubgraphRAGFormat):
    register_format(_cls)


def prompt_format(fmt: str | PromptFormat) -> PromptFormat:
    """The registered format named ``fmt`` (a format object is returned as it is)."""
    if isinstance(fmt, PromptFormat):
        return fmt
    return FORMATS.resolve(str(fmt))


# --------------------------------------------------------------------------- evidence and prompts


def triple_line(t: Sequence[str], fmt: str | PromptFormat) -> str:
    return prompt_format(fmt).triple_line(t)


def evidence_lines(row: Mapping[str, Any] | None, fmt: str | PromptFormat, k: int) -> tuple[list[str], list[list[str]]]:
    """Best-first evidence lines of one results row (at most ``k``) and the entities each mentions."""
    form = prompt_format(fmt)
    if not row or k <= 0:
        return [], []
    merged = row.get("evidence")
    if isinstance(merged, list):  # merged from several sources (evidence_merge): already best first
        return [str(e["line"]) for e in merged], [list(e.get("entities") or []) for e in merged]
    triples = [list(t) for t in row.get("triples") or []]
    scores = row.get("scores")
    if scores is not None and len(scores) == len(triples) and triples:
        order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
        triples = [triples[i] for i in order]
    return form.lines(row, triples, k)


def _path_entities(path: str) -> list[str]:
    parts = [p for p in path.replace(" <- ", " -> ").split(" -> ")]
    return parts[0::2]


def format_target(answers: Sequence[str], fmt: str | PromptFormat) -> str:
    """The assistant turn the reader is trained to produce."""
    return prompt_format(fmt).target([a for a in answers if str(a).strip()])


def build_messages(
    question: str, lines: Sequence[str], fmt: str | PromptFormat, with_evidence: bool = True, icl: bool = True
) -> list[dict]:
    """Chat messages of one question; ``with_evidence=False`` asks closed-book."""
    return prompt_format(fmt).messages(question, lines, with_evidence, icl)


def _count_tokens(tokenizer, messages: list[dict]) -> int:
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = out["input_ids"] if hasattr(out, "keys") else out
    return len(ids)


def within_shares(sources: Sequence[str], shares: Mapping[str, int | None], lengths: Sequence[int]) -> list[int]:
    """Positions of the lines kept when each source may fill at most its share of tokens
    (``lengths``: tokens per line); a line over its source's share is dropped, later shorter ones
    of that source may still fit, order kept."""
    used: dict[str, int] = {}
    keep = []
    for i, (source, n) in enumerate(zip(sources, lengths)):
        cap = shares.get(source)
        if cap is not None and used.get(source, 0) + n > cap:
            continue
        used[source] = used.get(source, 0) + n
        keep.append(i)
    return keep


def token_lengths(tokenizer, lines: Sequence[str]) -> list[int]:
    """Tokens of each line (+ the newline joining lines); about 4 characters per token without a
    tokenizer (a prompted endpoint's tokenizer is not at hand)."""
    if tokenizer is None:
        return [len(line) // 4 + 2 for line in lines]
    return [len(ids) + 1 for ids in tokenizer(list(lines), add_special_tokens=False)["input_ids"]]


def fit_budget(tokenizer, line_lists: Sequence[Sequence[str]], budgets: Sequence[int]) -> np.ndarray:
    """How many leading lines of each list fit in its token budget (one tokenizer call for all)."""
    sizes = np.asarray([len(x) for x in line_lists], dtype=np.int64)
    flat = [line for lines in line_lists for line in lines]
    if not flat:
        return np.zeros(len(line_lists), dtype=np.int64)
    lengths = (
        np.asarray([len(ids) for ids in tokenizer(flat, add_special_tokens=False)["input_ids"]], dtype=np.int64) + 1
    )  # + the newline joining lines
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    cum = np.cumsum(lengths)
    before = np.where(starts > 0, cum[np.maximum(starts - 1, 0)], 0)
    within = cum - np.repeat(before, sizes)  # cumulative tokens inside each question
    fits = within <= np.repeat(np.asarray(budgets, dtype=np.int64), sizes)
    # fits is monotone inside a segment (cumulative lengths, one budget), so its sum is the prefix length
    segment = np.repeat(np.arange(len(line_lists)), sizes)
    return np.bincount(segment, weights=fits, minlength=len(line_lists)).astype(np.int64)


def build_examples(
    questions: Sequence[Mapping[str, Any]],
    results: Mapping[str, Mapping[str, Any]] | None,
    fmt: str | PromptFormat,
    k: int,
    tokenizer=None,
    max_prompt_tokens: int | None = None,
    icl: bool = True,
) -> list[ReaderExample]:
    """Reader examples for ``questions`` (dicts with id, question, answers, in_kg, hops).

    ``results`` maps question id -> results row (``None`` or ``k = 0``: closed book). With a
    tokenizer and ``max_prompt_tokens`` the evidence is cut to fit, lowest-scored first.
    """
    fmt = prompt_format(fmt)
    evidence = results if k > 0 else None
    with_evidence = evidence is not None
    lines_per_q, ents_per_q, srcs_per_q = [], [], []
    for q in questions:
        row = evidence.get(q["id"]) if evidence is not None else None
        lines, ents = evidence_lines(row, fmt, k)
        merged = row.get("evidence") if row else None
        srcs = [str(e["source"]) for e in merged] if isinstance(merged, list) else []
        shares = (row.get("shares") if row else None) or {}
        if srcs and lines and any(v is not None for v in shares.values()):
            kept = within_shares(srcs, shares, token_lengths(tokenizer, lines))
            lines, ents, srcs = [lines[i] for i in kept], [ents[i] for i in kept], [srcs[i] for i in kept]
        lines_per_q.append(lines)
        ents_per_q.append(ents)
        srcs_per_q.append(srcs)
    keep = np.asarray([len(x) for x in lines_per_q], dtype=np.int64)
    if with_evidence and tokenizer is not None and max_prompt_tokens:
        overhead = [_count_tokens(tokenizer, build_messages(q["question"], [], fmt, True, icl)) for q in questions]
        budgets = [max(int(max_prompt_tokens) - o, 0) for o in overhead]
        keep = fit_budget(tokenizer, lines_per_q, budgets)
    out = []
    for q, lines, ents, srcs, n in zip(questions, lines_per_q, ents_per_q, srcs_per_q, keep.tolist()):
        shown = lines[:n]
        entities = list(dict.fromkeys(e for es in ents[:n] for e in es))
        out.append(
            ReaderExample(
                id=q["id"],
                question=q["question"],
                messages=build_messages(q["question"], shown, fmt, with_evidence, icl),
                target=format_target(q["answers"], fmt),
                answers=list(q["answers"]),
                in_kg=bool(q.get("in_kg", True)),
                hops=int(q.get("hops", -1)),
                evidence_shown=len(shown),
                evidence_total=len(lines),
                entities=entities,
                sources=srcs[:n],
            )
        )
    return out


# --------------------------------------------------------------------------- parsing

_NONE = {"not available", "none", "unknown", "n a", "no answer", "i don t know"}


def parse_response(text: str, fmt: str | PromptFormat) -> list[str]:
    """Answers of a reader response, read the way its format asks for them (``ans:`` lines for
    ``subgraphrag``, else one per line).

    Lines whose normalised form says "no answer" (``not available``, ``none``...) are dropped;
    duplicates (after `normalize_answer`) are removed, first occurrence kept.
    """
    out, seen = [], set()
    for item in prompt_format(fmt).items(text):
        norm = normalize_answer(item)
        if not norm or norm in _NONE or norm in seen:
            continue
        seen.add(norm)
        out.append(item.strip())
    return out
