"""Reading what a model answered: JSON, numbered lists, ``evidence:`` / ``ans:`` lines, chains.

Models format answers in many ways (fenced JSON, ``1.`` or ``1)`` lists, prose), so each
parser tries the structured reading first (JSON), then a line-based one. Matching against the
candidates offered in the prompt is strict: a chain or triple that was not offered is
*rejected* and reported (never accepted, never silently dropped), and numbers are accepted only
where a line holds nothing but numbers, so prose such as "I found 2 chains" selects nothing.
Callers keep the raw response next to the parsed result for audit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# Freebase relation ids: domain.type.property (at least two dots), letters, digits, _ and -.
RELATION_TOKEN = re.compile(r"[A-Za-z_][\w-]*(?:\.[\w-]+){2,}")
_FENCE = re.compile(r"```[\w-]*\s*\n?(.*?)```", re.S)
_MARKER = re.compile(r"^\s*(?:[-*\u2022+]\s+|(?:#|no\.?\s*)?\(?(\d+)\s*[.):\]]\s*|(?:#)(\d+)\s+)")
_LABEL = re.compile(
    r"^\s*(?:(?:the\s+)?(?:final\s+|correct\s+)?answer\s+is\s*:?|(?:selected|relevant|answer|answers|"
    r"chains?|evidence|ans|output|result)\s*(?:chains?)?\s*:)\s*",
    re.I,
)
_NUMBERS_ONLY = re.compile(
    r"^(?:(?:chains?|candidates?|numbers?|#|no\.?)\s*)?#?\d+"
    r"(?:\s*(?:,|;|/|&|and|\s)\s*#?\d+)*\s*\.?$",
    re.I,
)
_TEMPLATE_LABEL = re.compile(r"^\s*(?:pseudo[\s-]*)?(?:question|template|q)\s*\d*\s*[:.)-]\s*", re.I)
_SLOT = "[SUBJECT]"
_SLOT_LOOSE = re.compile(r"\[\s*subject\s*\]", re.I)


# ----------------------------------------------------------------------------- generic


def fenced_blocks(text: str) -> list[str]:
    return [m.group(1) for m in _FENCE.finditer(text)]


def extract_json(text: str) -> Any | None:
    """The first JSON array / object in ``text`` (inside ``` fences first), or None."""
    decoder = json.JSONDecoder()
    for chunk in [*fenced_blocks(text), text]:
        chunk = chunk.strip()
        try:
            return json.loads(chunk)
        except json.JSONDecodeError:
            pass
        for m in re.finditer(r"[\[{]", chunk):
            try:
                obj, _ = decoder.raw_decode(chunk, m.start())
            except json.JSONDecodeError:
                continue
            if isinstance(obj, (list, dict)) and obj:
                return obj
    return None


def split_marker(line: str) -> tuple[int | None, str]:
    """``"2) foo"`` -> ``(2, "foo")``; ``"- foo"`` -> ``(None, "foo")``; no marker -> ``(None, line)``."""
    m = _MARKER.match(line)
    if not m:
        return None, line.strip()
    num = m.group(1) or m.group(2)
    return (int(num) if num else None), line[m.end() :].strip()


def list_items(text: str) -> list[str]:
    """Non-empty lines with list markers (``1.``, ``1)``, ``-``, ``*``) removed."""
    out = []
    for line in text.splitlines():
        _, rest = split_marker(line)
        rest = rest.strip()
        if rest:
            out.append(rest)
    return out


def prefixed_lines(text: str, prefix: str) -> list[str]:
    """Contents of lines that start with ``prefix:`` (any case, after an optional list marker)."""
    pat = re.compile(rf"^\s*\**{re.escape(prefix)}\**\s*:\s*(.*)$", re.I)
    out = []
    for line in text.splitlines():
        _, rest = split_marker(line)
        m = pat.match(rest) or pat.match(line)
        if m and m.group(1).strip():
            out.append(m.group(1).strip())
    return out


def parse_answers(text: str) -> list[str]:
    """Reader answers: the ``ans:`` lines (SubgraphRAG's format)."""
    return prefixed_lines(text, "ans")


def parse_chain(text: str) -> tuple[str, ...]:
    """Relation ids in order from ``"r1 -> r2"``, ``"r1, r2"``, ``"[\\"r1\\", \\"r2\\"]"`` ..."""
    return tuple(m.group(0).rstrip(".-") for m in RELATION_TOKEN.finditer(text))


def _numbers(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


# ----------------------------------------------------------------------------- chains


@dataclass
class Selection:
    """Indices (0-based) of accepted candidates, in answer order, plus what was rejected."""

    selected: list[int] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    method: str = "none"  # json | lines | none
    over_limit: int = 0

    def _add(self, index: int | None, text: str) -> None:
        if index is None:
            if text not in self.rejected:
                self.rejected.append(text)
        elif index not in self.selected:
            self.selected.append(index)


def _chain_items_from_json(obj: Any) -> list[Any] | None:
    if isinstance(obj, dict):
        for k in ("chains", "selected", "relevant_chains", "relevant", "answer", "answers", "paths"):
            if isinstance(obj.get(k), list):
                return obj[k]
        lists = [v for v in obj.values() if isinstance(v, list)]
        return lists[0] if lists else None
    return obj if isinstance(obj, list) else None


def parse_chain_selection(text: str, candidates: Sequence[Sequence[str]]) -> Selection:
    """Which of the numbered ``candidates`` (relation chains) the answer selects.

    Items are read from JSON if present (numbers, chain strings, lists of relations), else
    line by line: a line holding relation ids is a chain, a line holding only numbers refers
    to candidates by their 1-based number. A chain that is not a candidate, or a number out
    of range, is rejected.
    """
    lookup = {tuple(c): i for i, c in enumerate(candidates)}
    sel = Selection()

    def by_number(n: int) -> None:
        sel._add(n - 1 if 1 <= n <= len(candidates) else None, f"#{n}")

    def by_chain(chain: tuple[str, ...], shown: str) -> None:
        sel._add(lookup.get(chain), " -> ".join(chain) if chain else shown)

    items = _chain_items_from_json(extract_json(text))
    if items is not None:
        sel.method = "json"
        for item in items:
            if isinstance(item, bool):
                continue
            if isinstance(item, int):
                by_number(item)
            elif isinstance(item, str):
                chain = parse_chain(item)
                if chain:
                    by_chain(chain, item)
                elif _NUMBERS_ONLY.match(item.strip()):
                    for n in _numbers(item):
                        by_number(n)
            elif isinstance(item, list) and all(isinstance(x, str) for x in item):
                by_chain(parse_chain(" ".join(item)), json.dumps(item))
            elif isinstance(item, dict):
                for k in ("chain", "relations", "path"):
                    if k in item:
                        v = item[k]
                        by_chain(parse_chain(v if isinstance(v, str) else " ".join(map(str, v))), json.dumps(item))
                        break
                else:
                    for k in ("number", "id", "index"):
                        if isinstance(item.get(k), int):
                            by_number(item[k])
                            break
        return sel
    for line in text.splitlines():
        num, rest = split_marker(line)
        rest = _LABEL.sub("", rest).strip().strip("`*\"'")
        chain = parse_chain(rest)
        if chain:
            sel.method = "lines"
            by_chain(chain, rest)
        elif rest and _NUMBERS_ONLY.match(rest):
            sel.method = "lines"
            for n in _numbers(rest):
                by_number(n)
        elif not rest and num is not None:
            sel.method = "lines"
            by_number(num)
    return sel


# ----------------------------------------------------------------------------- triples


def _norm(s: str) -> str:
    return " ".join(s.strip().strip("\"'`").split()).casefold()


def parse_triple(text: str, relations: Iterable[str] | None = None) -> tuple[str, str, str] | None:
    """``"(h, r, t)"``, ``"h | r | t"``, ``'["h", "r", "t"]'`` -> ``(h, r, t)``; None if unreadable.

    Entity names may contain commas ("Martin Luther King, Jr."), so the relation (a known
    relation if ``relations`` is given, else the first relation-like id) splits the text.
    """
    s = text.strip().rstrip(".;")
    if s.startswith("[") or s.startswith("{"):
        try:
            obj = json.loads(s)
            if isinstance(obj, list) and len(obj) == 3 and all(isinstance(x, str) for x in obj):
                return tuple(x.strip() for x in obj)  # type: ignore[return-value]
        except json.JSONDecodeError:
            pass
    if len(s) >= 2 and s[0] in "([{<" and s[-1] in ")]}>":
        s = s[1:-1]
    for sep in ("|", "\t"):
        parts = [p.strip() for p in s.split(sep)]
        if len(parts) == 3 and all(parts):
            return parts[0], parts[1], parts[2]
    known = set(relations) if relations is not None else None
    for m in RELATION_TOKEN.finditer(s):
        rel = m.group(0)
        if known is not None and rel not in known:
            continue
        head = s[: m.start()].rstrip().rstrip(",;").strip().strip("\"'")
        tail = s[m.end() :].lstrip().lstrip(",;").strip().strip("\"'")
        if head and tail:
            return head, rel, tail
    return None


def parse_triple_selection(
    text: str, candidates: Sequence[Sequence[str]], limit: int | None = None, numbered: bool = True
) -> Selection:
    """Which candidate triples the answer lists (``evidence:`` lines, JSON, or numbered lines).

    A triple that is not among the candidates (after trimming quotes, spaces and case) is
    rejected; if the prompt ``numbered`` the candidates, an item holding only a number picks
    the candidate with that 1-based number (else it is rejected).
    At most ``limit`` are kept; the rest are counted in ``over_limit``.
    """
    exact = {tuple(c): i for i, c in enumerate(candidates)}
    loose: dict[tuple[str, ...], int] = {}
    for i, c in enumerate(candidates):
        loose.setdefault(tuple(_norm(x) for x in c), i)
    relations = {c[1] for c in candidates}
    sel = Selection()

    def add_text(item: str) -> None:
        item = item.strip()
        if not item:
            return
        if re.fullmatch(r"#?\d+\.?", item):
            n = int(item.strip("#."))
            sel._add(n - 1 if numbered and 1 <= n <= len(candidates) else None, f"#{n}")
            return
        _, rest = split_marker(item)
        trip = parse_triple(rest, relations) or parse_triple(rest)
        if trip is None:
            sel._add(None, rest)
            return
        idx = exact.get(trip)
        if idx is None:
            idx = loose.get(tuple(_norm(x) for x in trip))
        sel._add(idx, "(" + ", ".join(trip) + ")")

    obj = extract_json(text)
    items: list[Any] | None = None
    if isinstance(obj, dict):
        lists = [v for k, v in obj.items() if isinstance(v, list)]
        items = lists[0] if lists else None
    elif isinstance(obj, list):
        items = obj
    if items is not None and not (
        len(items) == 3 and all(isinstance(x, str) for x in items) and RELATION_TOKEN.fullmatch(str(items[1]))
    ):
        sel.method = "json"
        for item in items:
            if isinstance(item, bool):
                continue
            if isinstance(item, int):
                add_text(str(item))
            elif isinstance(item, str):
                add_text(item)
            elif isinstance(item, list) and len(item) == 3 and all(isinstance(x, str) for x in item):
                add_text(json.dumps(item))
    else:
        lines = prefixed_lines(text, "evidence")
        if not lines:  # no evidence lines: take list items that look like triples
            lines = [x for x in list_items(text) if RELATION_TOKEN.search(x)]
        if lines:
            sel.method = "lines"
        for line in lines:
            add_text(line)
    if limit is not None and len(sel.selected) > limit:
        sel.over_limit = len(sel.selected) - limit
        sel.selected = sel.selected[:limit]
    return sel


# ----------------------------------------------------------------------------- templates


@dataclass
class TemplateCheck:
    kept: list[str] = field(default_factory=list)
    rejected: list[dict] = field(default_factory=list)  # {"template", "reason"}


def normalise_template(t: str) -> str:
    """Canonical form used to spot duplicates: lower case, single spaces, no end punctuation."""
    t = _SLOT_LOOSE.sub(_SLOT, t)
    t = re.sub(r"[^\w\[\]\s]", " ", t.replace(_SLOT, "\0")).replace("\0", _SLOT)
    return " ".join(t.split()).casefold()


def parse_templates(text: str) -> list[str]:
    """Candidate question templates: a JSON list of strings, else list items / lines."""
    obj = extract_json(text)
    if isinstance(obj, dict):
        obj = next((v for v in obj.values() if isinstance(v, list)), None)
    if isinstance(obj, list) and obj and all(isinstance(x, str) for x in obj):
        return [x.strip() for x in obj]
    out = []
    for item in list_items(text):
        item = _TEMPLATE_LABEL.sub("", _LABEL.sub("", item)).strip().strip("\"'`")
        if item:
            out.append(item)
    return out


def check_templates(
    candidates: Sequence[str],
    max_templates: int | None = None,
    slot: str = _SLOT,
    prompt: str | None = None,
    require_question_mark: bool = False,
) -> TemplateCheck:
    """Keep templates with the slot exactly once, other words, no duplicate (normalised), not
    copied from the ``prompt`` (small models echo instruction lines), optionally ending in '?'."""
    res = TemplateCheck()
    seen: set[str] = set()
    prompt_norm = normalise_template(prompt) if prompt else ""
    for raw in candidates:
        t = " ".join(_SLOT_LOOSE.sub(slot, raw).split())
        n = t.count(slot)
        words = re.sub(r"\W+", " ", t.replace(slot, " ")).split()
        if not t:
            reason = "empty"
        elif n == 0:
            reason = "no_slot"
        elif n > 1:
            reason = "multiple_slots"
        elif len(words) < 2:
            reason = "no_question_text"
        elif normalise_template(t) in seen:
            reason = "duplicate"
        elif prompt_norm and normalise_template(t) in prompt_norm:
            reason = "copied_from_prompt"
        elif require_question_mark and not t.rstrip().endswith("?"):
            reason = "not_a_question"
        elif max_templates is not None and len(res.kept) >= max_templates:
            reason = "over_limit"
        else:
            seen.add(normalise_template(t))
            res.kept.append(t)
            continue
        res.rejected.append({"template": raw, "reason": reason})
    return res
