"""Facts checked against a knowledge graph, offline: the calibration set, the encoder verifier and
the figures of OKGQA's hallucination study (FActScore with its length penalty, the hallucination
ratio, a verifier's AUC and accuracy).

Two verbalisations on purpose: the knowledge source is the question's graph as triple lines
``(h, r, t)`` (`triple_line`, what readers see), while a fact is a sentence
(`fact_sentence`, the way an answer states it), so a true fact matches its triple closely
but never verbatim, as an atomic fact split from a long-form answer would.

The calibration set (`calibration_facts`): per question, ``per_question`` triples between
named entities (not Freebase's bookkeeping relations), each as a true fact and two false ones:
the relation swapped for another relation of the same graph, and the tail replaced by another
named entity of the graph (neither of which is a triple of the graph). A verifier's support
scores on it give its AUC and the threshold with the best accuracy (`calibrate`), so a user
sees how far to trust a judge before using it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gsr_train.kg.index import SplitGraphs, names_have_text
from gsr_train.text.embeddings import relation_words

KINDS = ("true", "relation_swapped", "entity_replaced")
META_RELATIONS = ("freebase.", "type.", "common.", "kg.")  # bookkeeping, not facts anyone states


def triple_line(head: str, relation: str, tail: str) -> str:
    """A knowledge-source line: the triple as readers see it."""
    return f"({head}, {relation}, {tail})"


def fact_sentence(head: str, relation: str, tail: str) -> str:
    """A fact as an answer would state it: ``Jamaica country languages spoken Jamaican English.`` (the
    last words of the relation, which name the property, not its id)."""
    words = relation_words(relation).split()
    return f"{head} {' '.join(words[-3:])} {tail}."  # the last words name the property, the first the domain


@dataclass(frozen=True)
class Fact:
    """One calibration fact: its sentence, whether it is true, how it was made, and its question."""

    text: str
    label: int  # 1 true, 0 false
    kind: str  # one of KINDS
    question: int  # position in the split: its graph is the knowledge source
    about: int  # local node id of the entity the fact is about (its lines are the evidence looked at)


def graph_lines(
    split: SplitGraphs, q: int, entities: Sequence[str], relations: Sequence[str], about: Sequence[int] | None = None
) -> list[str]:
    """The knowledge source of question ``q``: the triples of its graph as lines, or only those that
    touch the local nodes ``about`` (what a fact about them is checked against: a graph holds
    thousands of triples, a fact concerns a few)."""
    g = split.graph(q)
    heads, tails, rels = g.edge_index[0], g.edge_index[1], g.edge_rel
    if about is not None:
        wanted = torch.as_tensor(list(about), dtype=heads.dtype)
        keep = torch.isin(heads, wanted) | torch.isin(tails, wanted)
        heads, tails, rels = heads[keep], tails[keep], rels[keep]
    ids = g.entity_ids
    hs, ts = _names(entities, ids[heads]), _names(entities, ids[tails])
    return [triple_line(h, r, t) for h, r, t in zip(hs, _names(relations, rels), ts)]


def _names(vocab, ids: torch.Tensor) -> list[str]:
    """Names of ``ids`` in one call (a memory-mapped `gsr_train.kg.vocab.StringVocab` takes
    them through Arrow) or from a plain list."""
    if hasattr(vocab, "take"):
        return vocab.take(ids.numpy())
    return [vocab[i] for i in ids.tolist()]


def calibration_facts(
    split: SplitGraphs, entities: Sequence[str], relations: Sequence[str], per_question: int = 2, seed: int = 0
) -> list[Fact]:
    """True and perturbed facts from the split's graphs (see the module docstring); deterministic in
    ``seed``. A question whose graph offers no perturbation of a triple gives none for it."""
    rng = np.random.default_rng(seed)
    named = names_have_text(entities)
    num_r = len(relations)
    meta_rel = np.asarray([relations[r].startswith(META_RELATIONS) for r in range(num_r)], dtype=bool)
    out: list[Fact] = []
    for q in range(len(split)):
        g = split.graph(q)
        ids = g.entity_ids.numpy()
        heads, tails = g.edge_index[0].numpy().astype(np.int64), g.edge_index[1].numpy().astype(np.int64)
        rels = g.edge_rel.numpy().astype(np.int64)
        meta = meta_rel[rels]
        ok = named[ids[heads]] & named[ids[tails]] & ~meta
        if not ok.any():
            continue
        n = len(ids)
        existing = np.unique((heads * num_r + rels) * n + tails)  # every triple of the graph as one key
        candidates = np.flatnonzero(ok)
        graph_rels = np.unique(rels[~meta])
        named_nodes = np.flatnonzero(named[ids])
        for e in rng.choice(candidates, size=min(per_question, candidates.size), replace=False).tolist():
            h, r, t = int(heads[e]), int(rels[e]), int(tails[e])
            name = lambda local: entities[int(ids[local])]  # noqa: E731
            out.append(Fact(fact_sentence(name(h), relations[r], name(t)), 1, "true", q, h))
            # the first relation / tail of a random order that makes no triple of the graph
            other_r = rng.permutation(graph_rels)
            other_r = other_r[~np.isin((h * num_r + other_r) * n + t, existing)]
            if other_r.size:
                out.append(Fact(fact_sentence(name(h), relations[int(other_r[0])], name(t)), 0, KINDS[1], q, h))
            other_t = rng.permutation(named_nodes)
            other_t = other_t[(other_t != h) & (other_t != t) & ~np.isin((h * num_r + r) * n + other_t, existing)]
            if other_t.size:
                out.append(Fact(fact_sentence(name(h), relations[r], name(int(other_t[0]))), 0, KINDS[2], q, h))
    return out


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


class Knowledge:
    """A knowledge source's lines, each line's words found once as ids (a question's graph is matched
    against every fact of every answer about it): the overlap of a fact with all lines is one
    ``isin`` + ``bincount`` over the lines' word ids, not a loop over lines."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = list(lines)
        self._vocab: dict[str, int] | None = None
        self._line_of: np.ndarray = np.zeros(0, dtype=np.int64)
        self._word_ids: np.ndarray = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.lines)

    def _index(self) -> dict[str, int]:
        if self._vocab is None:
            vocab: dict[str, int] = {}
            per_line = [[vocab.setdefault(w, len(vocab)) for w in _words(line)] for line in self.lines]
            self._line_of = np.repeat(np.arange(len(per_line)), [len(w) for w in per_line])
            self._word_ids = np.fromiter((w for ws in per_line for w in ws), dtype=np.int64, count=len(self._line_of))
            self._vocab = vocab
        return self._vocab

    def closest(self, fact: str, n: int) -> list[str]:
        if len(self.lines) <= n:
            return list(self.lines)
        vocab = self._index()
        wanted = np.asarray([vocab[w] for w in _words(fact) if w in vocab], dtype=np.int64)
        hits = self._line_of[np.isin(self._word_ids, wanted)]
        overlap = np.bincount(hits, minlength=len(self.lines))
        keep = np.argsort(-overlap, kind="stable")[:n]
        return [self.lines[i] for i in keep]


def closest_lines(fact: str, lines: Sequence[str] | Knowledge, n: int) -> list[str]:
    """The ``n`` lines sharing most words with ``fact`` (a lexical first stage, as FActScore retrieves
    passages before judging: a graph holds thousands of lines, a fact concerns a few)."""
    return (lines if isinstance(lines, Knowledge) else Knowledge(lines)).closest(fact, n)


class EncoderVerifier:
    """Support of a fact = its highest cosine similarity to a line of its knowledge source, with a
    frozen text encoder (any `gsr_train.text.encoders.TextEncoder`), over the ``candidates``
    lines that share most words with it; every distinct text is encoded once."""

    name = "encoder"

    def __init__(self, encoder, candidates: int = 32, batch_size: int = 256) -> None:
        self.encoder, self.candidates, self.batch_size = encoder, int(candidates), int(batch_size)

    def support(self, facts: Sequence[str], sources: Sequence[Sequence[str] | Knowledge]) -> np.ndarray:
        """``[len(facts)]`` support scores in [-1, 1]; ``sources[i]`` is fact i's knowledge lines (an
        empty source gives -1: nothing supports the fact)."""
        if len(facts) != len(sources):
            raise ValueError(f"{len(facts)} facts but {len(sources)} knowledge sources")
        near = [closest_lines(f, lines, self.candidates) for f, lines in zip(facts, sources)]
        texts = list(dict.fromkeys([*facts, *(line for lines in near for line in lines)]))
        where = {t: i for i, t in enumerate(texts)}
        emb = torch.nn.functional.normalize(self.encoder.encode(texts, batch_size=self.batch_size).float(), dim=-1)
        out = np.full(len(facts), -1.0)
        for i, (fact, lines) in enumerate(zip(facts, near)):
            if lines:
                rows = torch.as_tensor([where[line] for line in lines])
                out[i] = float((emb[rows] @ emb[where[fact]]).max())
        return out


def auc(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray) -> float | None:
    """Area under the ROC curve (the chance that a true fact outscores a false one; ties count half);
    None without both kinds."""
    s, y = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=bool)
    pos, neg = int(y.sum()), int((~y).sum())
    if not pos or not neg:
        return None
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    # average ranks over ties
    start = 0
    for end in np.append(np.flatnonzero(np.diff(sorted_s)) + 1, len(s)):
        ranks[order[start:end]] = (start + end + 1) / 2.0
        start = end
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def calibrate(
    scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray
) -> dict[str, float | int | None]:
    """The threshold (support >= threshold: supported) with the best accuracy on a labelled set, that
    accuracy, and the AUC."""
    s, y = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    if s.size == 0:
        raise ValueError("calibration needs at least one labelled fact")
    candidates = np.unique(s)
    best_t, best_acc = float(candidates[0]), -1.0
    for t in candidates:
        acc = float(((s >= t).astype(np.int64) == y).mean())
        if acc > best_acc:
            best_t, best_acc = float(t), acc
    return {"threshold": best_t, "accuracy": best_acc, "auc": auc(s, y), "facts": int(s.size), "true": int(y.sum())}


def factscore(supported: Sequence[Sequence[bool]], gamma: int = 10) -> dict[str, float | int | None]:
    """FActScore over answers (``supported[i]``: the verdict on each atomic fact of answer i): the mean
    share of supported facts, each answer's share multiplied by FActScore's length penalty
    ``exp(1 - gamma / n)`` when it has ``n < gamma`` facts (``gamma=0``: none); the hallucination
    ratio (unsupported facts over all facts); answers without a fact are counted, not scored."""
    shares, penalised, facts, unsupported, empty = [], [], 0, 0, 0
    for verdicts in supported:
        n = len(verdicts)
        if n == 0:
            empty += 1
            continue
        share = sum(bool(v) for v in verdicts) / n
        shares.append(share)
        penalised.append(share * (math.exp(1 - gamma / n) if gamma and n < gamma else 1.0))
        facts += n
        unsupported += n - sum(bool(v) for v in verdicts)
    return {
        "factscore": float(np.mean(penalised)) if penalised else None,
        "factscore_no_penalty": float(np.mean(shares)) if shares else None,
        "hallucination_ratio": unsupported / facts if facts else None,
        "answers": len(shares),
        "answers_without_facts": empty,
        "facts": facts,
    }


def agreement(a: Sequence[bool], b: Sequence[bool]) -> dict[str, float | int | None]:
    """How often two verifiers agree on the same facts, and Cohen's kappa (agreement beyond what
    their rates of "supported" would give by chance; None when that chance is 1)."""
    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if x.shape != y.shape:
        raise ValueError(f"agreement: {x.size} verdicts against {y.size}")
    if x.size == 0:
        return {"facts": 0, "agreement": None, "kappa": None}
    observed = float((x == y).mean())
    chance = float(x.mean() * y.mean() + (1 - x.mean()) * (1 - y.mean()))
    kappa = None if chance >= 1.0 else (observed - chance) / (1.0 - chance)
    return {"facts": int(x.size), "agreement": observed, "kappa": kappa}
