"""Linking by label lookups: what a KG behind a SPARQL endpoint can answer fast (an exact match on an
indexed literal), done the same way on a store so the two give the same candidates.

A question's phrases are its word n-grams (up to ``max_words`` words, not all stop words, a possessive
``'s`` off), each as written, in Title Case and in lower case. An entity whose label (or id) is one
of them is a candidate; candidates rank by the length of the phrase that names them (longer first:
"justin bieber" before "justin"), then by degree (the better connected of two entities named alike),
then by name. The store's own linker
(`gsr_train.kg.linking`) is fuzzier and better; this is what an endpoint offers, and the parity test
holds both sources to it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from gsr_train.kg.linking import STOPWORDS

E = TypeVar("E")
_WORD = re.compile(r"[^\s\"“”?!,;:()\[\]]+")


def phrases(question: str, max_words: int = 5) -> list[tuple[str, int]]:
    """``(phrase, words)`` of the question, longest first, each spelling once."""
    words = [re.sub(r"['’]s$", "", w).strip(".'’") for w in _WORD.findall(question)]  # "hayes's": "hayes"
    words = [w for w in words if w]
    out: dict[str, int] = {}
    for n in range(min(max_words, len(words)), 0, -1):
        for i in range(len(words) - n + 1):
            gram = words[i : i + n]
            if all(w.lower() in STOPWORDS for w in gram):
                continue
            text = " ".join(gram)
            for spelling in (text, " ".join(w[:1].upper() + w[1:] for w in gram), text.lower()):
                out.setdefault(spelling, n)
    return list(out.items())


def rank(
    named: Mapping[str, Sequence[E]],
    spans: Mapping[str, int],
    degree: Callable[[list[E]], list[int]],
    name: Callable[[E], str],
) -> list[tuple[E, str]]:
    """Candidates ``(entity, phrase)`` best first (see the module docstring); an entity once, by its best phrase."""
    best: dict[E, tuple[int, str]] = {}
    for phrase, found in named.items():
        for e in found:
            if e not in best or spans[phrase] > best[e][0]:
                best[e] = (spans[phrase], phrase)
    entities = list(best)
    degrees = dict(zip(entities, degree(entities))) if entities else {}
    entities.sort(key=lambda e: (-best[e][0], -degrees[e], name(e)))
    return [(e, best[e][1]) for e in entities]
