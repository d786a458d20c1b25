"""Entity linking against the whole-KG store: a question's topic entities when its row has none.

Each named entity of the store (its label and aliases; a label-less entity that is no mediator by its
id, an IRI by its local name) is cut into normalised word tokens (lower case, accents and punctuation
off, a plural ``s`` off). A question's candidates are the entities sharing a token with it that fewer
than ``max_df`` names share; each is scored by

* the information of the question tokens it matches (their IDF over the store's names), times the
  share of its own name's information they cover (``coverage ** alpha``): "kennedy" finds John F.
  Kennedy, "john" alone finds little;
* a bonus when its whole name appears as a phrase in the question;
* a name of 3 to 5 words (stop words left out) is also known by its initials, which match a question
  word as a name of one word would, without the phrase bonus: "usa", "ufc", "nafta", "lbj"; a word
  written with an apostrophe inside is also read joined ("l'ouverture": Louverture);
* the KG's own prior, ``prior * log(1 + degree)``: of two entities named alike, the better connected;
* then the ``pool`` best are ranked again with the KG's words: ``relation_weight`` times the question
  words found in the names of the relations around the entity ("what language do the maasai speak"
  prefers Maasai people, whose edges include ``people.ethnicity.languages_spoken``).

Options chosen on webqsp_mini's train questions (topic recall@1 0.848, @5 0.950 with the KG made of the
fixture's graphs); on its test questions: 0.884 and 0.966.

The token index is built with Arrow compute over every name at once (no Python per name).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gsr_train.kg.index import names_have_text
from gsr_train.kg.store import KGStore
from gsr_train.kg.vocab import StringInterner

STOPWORDS = frozenset(
    "what who whom whose where when which why how is are was were be been being the a an of in on to did do does "
    "for and or by from with at as has have had this that these those it its into about there their they he she "
    "his her him name year type kind".split()
)


@dataclass(frozen=True)
class LinkOptions:
    max_df: int = 2000  # a token shared by more names than this finds no candidates (it scores still)
    alpha: float = 1.0
    phrase_bonus: float = 2.0
    prior: float = 1.0
    relation_weight: float = 4.0
    pool: int = 20
    edges_read: int = 3000  # edges per direction read for a candidate's relation words


def normalise(text: pa.Array) -> pa.Array:
    """Names or questions as lower-case ASCII words separated by one space."""
    text = pc.utf8_normalize(text.cast(pa.large_string()), "NFKD")
    text = pc.replace_substring_regex(pc.utf8_lower(text), r"[^a-z0-9]+", " ")
    return pc.utf8_trim_whitespace(text)


def _tokens(text: pa.Array) -> pa.ListArray:
    words = pc.split_pattern(normalise(text), " ")
    flat = pc.replace_substring_regex(pc.list_flatten(words), r"^([a-z0-9]{3,}[^s])s$", r"\1")  # plurals
    return pa.ListArray.from_arrays(words.offsets, flat)


def _joined(question: str) -> list[str]:
    """Words written with an apostrophe inside, joined: "l'ouverture" -> "louverture"."""
    found = re.findall(r"[^\W_]+['’][^\W_]{2,}", question)
    if not found:
        return []
    return _tokens(pa.array([f.replace("'", "").replace("’", "") for f in found])).values.to_pylist()


def _acronyms(texts: pa.Array) -> pa.Array:
    """The initials of names of 3 to 5 words, stop words left out ("United States of America": "usa"),
    else ""; in Arrow calls over every name at once."""
    words = _tokens(pc.replace_substring_regex(texts, "['’]", ""))  # O'Neal: one word
    values = pc.list_flatten(words)
    keep = pc.and_(
        pc.invert(pc.is_in(values, value_set=pa.array(sorted(STOPWORDS), values.type))),
        pc.greater(pc.utf8_length(values), 0),
    )
    kept = np.concatenate([[0], np.cumsum(keep.to_numpy(zero_copy_only=False))])[words.offsets.to_numpy()]
    firsts = pc.utf8_slice_codeunits(values.filter(keep), 0, 1)
    firsts = firsts.cast(pa.string())
    initials = pc.binary_join(pa.ListArray.from_arrays(pa.array(kept, pa.int32()), firsts), pa.scalar("", pa.string()))
    count = np.diff(kept)
    return pc.if_else(pa.array((count >= 3) & (count <= 5)), initials, "").cast(pa.large_string())


def _surfaces(store: KGStore) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """(entity, text, is initials) of every name an entity is known by: labels and aliases, else its
    id; and the initials of those of 3 to 5 words."""
    ids = store.entities.to_arrow()
    own = pc.replace_substring_regex(ids, r"^.*[/#]", "")  # an IRI's local name
    own = pc.replace_substring(own, "_", " ")
    keep = np.flatnonzero((np.asarray(store.label) < 0) & names_have_text(store.entities))
    name_entity = np.asarray(store.name_entity, dtype=np.int64)
    name_of = np.repeat(np.arange(len(store.names)), np.diff(np.asarray(store.name_ptr)))
    entities = np.concatenate([keep, name_entity])
    texts = pa.concat_arrays(
        [
            own.take(pa.array(keep)).cast(pa.large_string()),
            store.names.to_arrow().take(pa.array(name_of)).cast(pa.large_string()),
        ]
    )
    initials = _acronyms(texts)
    has = np.asarray(pc.greater(pc.utf8_length(initials), 2).to_numpy(zero_copy_only=False), dtype=bool)
    idx = np.flatnonzero(has)
    acronym = np.concatenate([np.zeros(entities.size, dtype=bool), np.ones(idx.size, dtype=bool)])
    return np.concatenate([entities, entities[idx]]), pa.concat_arrays([texts, initials.take(pa.array(idx))]), acronym


class EntityLinker:
    """Topic-entity candidates of questions, from one store's names (see the module docstring)."""

    def __init__(self, store: KGStore, options: LinkOptions | None = None) -> None:
        self.store, self.options = store, options or LinkOptions()
        entities, texts, acronym = _surfaces(store)
        tokens = _tokens(texts)
        interner = StringInterner()
        token_ids = interner.intern(pc.list_flatten(tokens).cast(pa.large_string()))
        self.vocab = interner.vocab()
        surface = np.repeat(np.arange(len(texts)), np.diff(tokens.offsets.to_numpy()))
        # each (token, surface) once; the document frequency of a token: the names it is in
        pairs = np.unique(token_ids * len(texts) + surface) if len(texts) else np.zeros(0, np.int64)
        tok, surf = pairs // max(len(texts), 1), pairs % max(len(texts), 1)
        df = np.bincount(tok, minlength=len(self.vocab))
        # the information of a word among the names themselves: initials neither add names nor dilute words
        named = int(np.count_nonzero(~acronym)) if len(texts) else 0
        df_names = np.bincount(tok[~acronym[surf]], minlength=len(self.vocab))
        self.idf = np.log(max(named, 1) / np.maximum(np.where(df_names > 0, df_names, df), 1))
        self.surface_acronym = acronym
        self.tok_ptr = np.concatenate([[0], np.cumsum(df)])
        self.tok_surface = surf
        self.surface_entity = entities
        self.surface_ptr = tokens.offsets.to_numpy()
        self.surface_tokens = token_ids
        self.degree = store.degree(np.arange(store.num_entities)).astype(np.float64)
        words = _tokens(store.relations.to_arrow())
        flat = words.values.to_pylist()
        offsets = words.offsets.to_numpy()
        self.relation_words = [frozenset(flat[offsets[r] : offsets[r + 1]]) for r in range(len(store.relations))]

    def link(self, question: str, k: int = 5) -> list[tuple[int, float]]:
        """The ``k`` best ``(entity id, score)`` for ``question``, best first (ties: the lower id)."""
        o = self.options
        words = _tokens(pa.array([question])).values.to_pylist()
        content = [w for w in words if w not in STOPWORDS]
        # a word and its stems of 4 letters or more ("japanese" finds "japan", "islamic" "islam")
        forms = content + [w[:n] for w in content for n in range(4, len(w)) if len(w) >= 6]
        forms += _joined(question)  # "l'ouverture" also as "louverture"
        found = self.vocab.lookup(pa.array(forms, pa.large_string()))
        asked = {int(t) for t in found if t >= 0}
        phrase = f" {' '.join(words)} "
        best: dict[int, float] = {}
        for t in asked:
            if self.tok_ptr[t + 1] - self.tok_ptr[t] > o.max_df:
                continue
            for s in self.tok_surface[self.tok_ptr[t] : self.tok_ptr[t + 1]].tolist():
                score = self._score(s, asked, phrase)
                e = int(self.surface_entity[s])
                if score > best.get(e, -math.inf):
                    best[e] = score
        pool = sorted(best.items(), key=lambda item: (-item[1], item[0]))[: max(o.pool, k)]
        said = set(content) | set(forms)
        ranked = [(e, score + o.relation_weight * len(said & self._words_around(e))) for e, score in pool]
        return sorted(ranked, key=lambda item: (-item[1], item[0]))[:k]

    def _words_around(self, entity: int) -> set[str]:
        """The words of the relations of the entity's first ``edges_read`` edges each way."""
        s, cap = self.store, self.options.edges_read
        out = s.out_edge[s.out_ptr[entity] : min(s.out_ptr[entity + 1], s.out_ptr[entity] + cap)]
        into = s.in_edge[s.in_ptr[entity] : min(s.in_ptr[entity + 1], s.in_ptr[entity] + cap)]
        relations = np.unique(np.asarray(s.rels[np.concatenate([out, into])]))
        return set().union(*(self.relation_words[r] for r in relations.tolist()))

    def _score(self, surface: int, asked: set[int], phrase: str) -> float:
        o = self.options
        own = self.surface_tokens[self.surface_ptr[surface] : self.surface_ptr[surface + 1]]
        distinct = set(own.tolist())
        matched = sum(self.idf[t] for t in distinct & asked)
        total = sum(self.idf[t] for t in distinct) or 1.0
        whole = distinct <= asked and f" {' '.join(self.vocab.take(own))} " in phrase
        whole = whole and not self.surface_acronym[surface]  # initials are no phrase
        entity = int(self.surface_entity[surface])
        prior = o.prior * math.log1p(self.degree[entity])
        return float(matched * (matched / total) ** o.alpha + (o.phrase_bonus if whole else 0.0) + prior)
