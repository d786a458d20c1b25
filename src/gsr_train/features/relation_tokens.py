"""Relation tokens: every KG relation is one atomic token of the tokenizer.

GSR's subgraph id is a chain of relations; decoding a relation name word piece by word
piece would cost ~15 tokens per relation and invite misspelt relations. Instead each
relation name (``people.person.place_of_birth``) is added to the tokenizer as a single
added token (not normalised, so it matches the name exactly) and the model's embedding
matrix grows to match. The two task prefixes ``[Index]`` / ``[Retrieval]`` are added as
special tokens.

Relation vocabularies come from the dataset (the KG index, the supervision chains) or from
a file with one name per line, such as ``freebase_relations.txt``. That file mixes
domains (``music``), types (``music.artist``) and relations (``music.artist.genre``):
``keep="relations"`` keeps only names with 3+ dot-separated parts (the relations; 25,714
of the 26,282 lines), ``keep="all"`` keeps every line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from gsr_train.io import atomic_write, open_text

INDEX_PREFIX = "[Index]"
RETRIEVAL_PREFIX = "[Retrieval]"
PREFIXES = (INDEX_PREFIX, RETRIEVAL_PREFIX)
KEEP_MODES = ("relations", "all")
_NAME = re.compile(r"^\S+$")


class RelationVocabError(ValueError):
    """A bad relation name or vocabulary file; the message names the file and line."""


def check_relation_name(name: str, where: str = "relation") -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise RelationVocabError(f"{where}: relation names must be non-empty and contain no whitespace, got {name!r}")
    return name


def load_relation_file(path: str | Path, keep: str = "relations") -> list[str]:
    """Relation names from a text file (one per line; blank lines and ``#`` comments skipped).

    ``keep="relations"``: only names with at least 3 dot-separated parts; ``"all"``: every line.
    Duplicates keep their first position.
    """
    if keep not in KEEP_MODES:
        raise ValueError(f"keep must be one of {KEEP_MODES}, got {keep!r}")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"relation vocabulary file {path} does not exist")
    names: dict[str, None] = {}
    with open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            name = line.strip()
            if not name or name.startswith("#"):
                continue
            check_relation_name(name, f"{path}:{lineno}")
            if keep == "relations" and len(name.split(".")) < 3:
                continue
            names.setdefault(name, None)
    if not names:
        raise RelationVocabError(f"{path}: no relation names (keep={keep!r})")
    return list(names)


def merge_vocab(*groups: Iterable[str]) -> list[str]:
    """Union of relation names, first occurrence order (deterministic)."""
    out: dict[str, None] = {}
    for group in groups:
        for name in group:
            out.setdefault(check_relation_name(name), None)
    return list(out)


def relation_words(name: str) -> str:
    """Readable words of a relation id: ``people.person.place_of_birth`` -> ``people person place of birth``."""
    return " ".join(w for w in re.split(r"[^0-9A-Za-z]+", name) if w)


def relation_token(name: str):
    """The added token of a relation: matched verbatim, never split, not special."""
    from tokenizers import AddedToken  # lazy: tokenizers is only needed when training a tokenizer

    return AddedToken(name, single_word=False, lstrip=False, rstrip=False, normalized=False, special=False)


def add_relation_tokens(tokenizer, relations: Sequence[str]) -> RelationTokens:
    """Add the task prefixes and one token per relation; returns the name <-> id map.

    Names already in the tokenizer as single tokens are reused. The caller must resize
    the model's embeddings to ``len(tokenizer)``.
    """
    from tokenizers import AddedToken  # lazy: tokenizers is only needed when training a tokenizer

    relations = merge_vocab(relations)
    prefixes = [
        AddedToken(p, single_word=False, lstrip=False, rstrip=False, normalized=False, special=True) for p in PREFIXES
    ]
    tokenizer.add_tokens(prefixes, special_tokens=True)
    tokenizer.add_tokens([relation_token(r) for r in relations])
    return RelationTokens(tokenizer, relations)


class RelationTokens:
    """Relation index ``k`` (position in ``relations``) <-> tokenizer id, checked on construction."""

    def __init__(self, tokenizer, relations: Sequence[str]) -> None:
        self.relations = list(relations)
        self.lookup = {r: k for k, r in enumerate(self.relations)}
        if len(self.lookup) != len(self.relations):
            raise RelationVocabError("relation vocabulary has duplicate names")
        ids = tokenizer.convert_tokens_to_ids(self.relations)
        unk = getattr(tokenizer, "unk_token_id", None)
        missing = [r for r, i in zip(self.relations, ids) if i is None or (unk is not None and i == unk)]
        if missing:
            raise RelationVocabError(
                f"{len(missing)} relations are not single tokens of the tokenizer (e.g. {missing[:3]}); "
                "was the tokenizer saved with its relation tokens?"
            )
        self.token_ids = torch.tensor(ids, dtype=torch.long)
        if len(set(ids)) != len(ids):
            raise RelationVocabError("two relations share one token id")
        for p in PREFIXES:
            pid = tokenizer.convert_tokens_to_ids(p)
            if pid is None or (unk is not None and pid == unk):
                raise RelationVocabError(f"task prefix {p!r} is not a token of the tokenizer")

    def __len__(self) -> int:
        return len(self.relations)

    def index(self, name: str) -> int:
        try:
            return self.lookup[name]
        except KeyError:
            raise KeyError(f"relation {name!r} is not in the model's relation vocabulary") from None

    def indices(self, chain: Sequence[str]) -> list[int]:
        return [self.index(r) for r in chain]

    def names(self, indices: Iterable[int]) -> tuple[str, ...]:
        return tuple(self.relations[k] for k in indices)


def write_relations(path: str | Path, relations: Sequence[str]) -> None:

    with atomic_write(path, "w", encoding="utf-8") as f:
        for r in relations:
            f.write(check_relation_name(r) + "\n")


def read_relations(path: str | Path) -> list[str]:
    return load_relation_file(path, keep="all")
