"""The one retrieval-result format (JSONL, one row per question) and string-triple matching.

Row: ``{"id": qid, "triples": [[h, r, t], ...] best first, "scores": [...], "chains":
[{"topic": e, "chain": [r1, r2], "score": s}, ...] (optional)}`` plus any extra fields.
Every retriever writes it and every reader / metric reads it, so any retriever can meet any
reader. Rows hold strings, not ids, so a file stays valid across index rebuilds.

Mapping string triples back onto the edges of a split is shared with the label loader
(`EdgeMatcher`): strings become global ids (one dict lookup each); packed int64
(question, entity) keys find the question's local nodes, then packed (head node, relation,
tail node) keys find the edge, both with one sort + searchsorted over the whole split.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from gsr_train.arrays import scatter
from gsr_train.data.errors import UserError
from gsr_train.eval.retrieval import edge_ranks
from gsr_train.io import iter_jsonl, write_jsonl
from gsr_train.kg.index import KGIndex, SplitGraphs
from gsr_train.kg.vocab import StringVocab

log = logging.getLogger(__name__)

RESERVED = ("id", "triples", "scores", "chains")
_INT64_LIMIT = 1 << 62


class TripleFileError(UserError, ValueError):
    """A results / labels file that does not fit the split; names file, line, id and triple."""


# --------------------------------------------------------------------------- matching


def _pack(columns: Sequence[torch.Tensor], sizes: Sequence[int]) -> torch.Tensor:
    """Mixed-radix int64 key of several id columns; re-numbers the partial key densely when
    the next radix would overflow int64 (so huge vocabularies still pack safely)."""
    key, size = columns[0].long(), max(int(sizes[0]), 1)
    for col, n in zip(columns[1:], sizes[1:]):
        n = max(int(n), 1)
        if size * n >= _INT64_LIMIT:
            uniq, key = torch.unique(key, return_inverse=True)
            size = max(int(uniq.numel()), 1)
            if size * n >= _INT64_LIMIT:  # pragma: no cover - needs > 2^31 distinct keys
                raise OverflowError("too many distinct keys to pack into int64")
        key = key * n + col.long()
        size *= n
    return key


def _lookup(ref: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """Position in ``ref`` (unique keys) of every query key, -1 where absent."""
    if ref.numel() == 0 or query.numel() == 0:
        return torch.full_like(query, -1)
    sorted_keys, order = torch.sort(ref)
    pos = torch.searchsorted(sorted_keys, query).clamp(max=ref.numel() - 1)
    return torch.where(sorted_keys[pos] == query, order[pos], torch.full_like(query, -1))


def _ids(vocab: StringVocab, names: list) -> torch.Tensor:
    """Ids of ``names`` in one vectorised lookup; -1 for an unknown name or one that is not a string."""
    strings = pa.array([n if isinstance(n, str) else None for n in names], pa.large_string())
    return torch.from_numpy(vocab.lookup(strings))


class EdgeMatcher:
    """Finds the edge id of (question, head, relation, tail) string triples in one split."""

    def __init__(self, index: KGIndex, split: SplitGraphs | str):
        self.index = index
        self.split = index[split] if isinstance(split, str) else split

    def match(self, question: torch.Tensor, triples: Sequence[Sequence[str]]) -> torch.Tensor:
        """``LongTensor[M]`` edge ids (global over the split) of the triples; -1 = not in the
        question's graph (unknown string, or known but not an edge of that question)."""
        if len(triples) == 0:
            return torch.empty(0, dtype=torch.long)
        ent, rel = self.index.entities, self.index.relations
        h, r, t = (_ids(vocab, [x[i] for x in triples]) for i, vocab in enumerate((ent, rel, ent)))
        return self.match_ids(question, h, r, t)

    def match_ids(self, question: torch.Tensor, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """`match` of triples already given as global (head, relation, tail) ids (-1: unknown)."""
        sp = self.split
        question, h, r, t = (torch.as_tensor(x, dtype=torch.long) for x in (question, h, r, t))
        m = h.numel()
        if m == 0:
            return torch.empty(0, dtype=torch.long)
        known = (h >= 0) & (r >= 0) & (t >= 0)
        num_q, num_e, num_r = len(sp), len(self.index.entities), len(self.index.relations)
        num_nodes = int(sp.ent_ptr[-1]) if num_q else 0
        # (question, global entity) -> flat local node index
        node_q = torch.repeat_interleave(torch.arange(num_q), sp.num_entities)
        qk, hk, tk = question[known], h[known], t[known]
        keys = _pack([torch.cat([node_q, qk, qk]), torch.cat([sp.entity_ids, hk, tk])], [num_q, num_e])
        n_known = int(known.sum())
        hits = _lookup(keys[:num_nodes], keys[num_nodes:])
        h_node, t_node = hits[:n_known], hits[n_known:]
        found = (h_node >= 0) & (t_node >= 0)
        # (head node, relation, tail node) -> edge id
        offsets = torch.repeat_interleave(sp.ent_ptr[:-1], sp.num_edges)
        e_h, e_t = sp.edge_index[0] + offsets, sp.edge_index[1] + offsets
        num_edges = e_h.numel()
        qh, qr, qt = h_node[found], r[known][found], t_node[found]
        keys = _pack(
            [torch.cat([e_h, qh]), torch.cat([sp.edge_rel, qr]), torch.cat([e_t, qt])], [num_nodes, num_r, num_nodes]
        )
        edge = _lookup(keys[:num_edges], keys[num_edges:])
        out = torch.full((m,), -1, dtype=torch.long)
        inner = torch.full((n_known,), -1, dtype=torch.long)
        inner[found] = edge
        out[known] = inner
        return out


# --------------------------------------------------------------------------- reading rows


@dataclass
class MatchStats:
    """What happened while mapping a file onto a split (kept in metrics JSON)."""

    path: str = ""
    rows: int = 0
    triples: int = 0
    matched: int = 0
    duplicate_triples: int = 0
    unknown_ids: int = 0
    unmatched_triples: int = 0
    missing_questions: int = 0
    examples: list[str] = field(default_factory=list)

    def note(self, message: str) -> None:
        if len(self.examples) < 10:
            self.examples.append(message)

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def counts_line(self) -> str | None:
        """What matching skipped, dropped or found missing, in one line for the screen (None: nothing)."""
        counts = (
            (self.unknown_ids, "ids not in the split skipped"),
            (self.unmatched_triples, "triples not in their question's graph skipped"),
            (self.duplicate_triples, "duplicate triples (each counted once)"),
            (self.missing_questions, "split questions without a row (retrieve nothing)"),
        )
        said = [f"{n} {what}" for n, what in counts if n]
        return f"{Path(self.path).name}: {self.rows} rows; " + ", ".join(said) if said else None

    def summary(self) -> str:
        return (
            f"{self.path}: {self.rows} rows, {self.matched}/{self.triples} triples matched, "
            f"{self.unknown_ids} unknown ids, {self.unmatched_triples} triples not in the graph, "
            f"{self.missing_questions} split questions missing from the file"
        )


@dataclass
class TripleRows:
    """Parsed id/triples rows, flattened: ``question[j]`` and ``rank[j]`` of ``triples[j]``."""

    question: torch.Tensor
    rank: torch.Tensor  # rank within its row: by score (highest first) when the row has scores, else file order
    triples: list[list[str]]
    line: list[int]
    rows: dict[int, dict]  # question position -> raw row


def _bad(path: Path, lineno: int, qid: Any, reason: str) -> TripleFileError:
    where = f"{path}: line {lineno}" + (f" (id {qid!r})" if qid is not None else "")
    return TripleFileError(f"{where}: {reason}")


def _iter_rows(path: Path) -> Iterator[tuple[int, Any]]:
    for lineno, record in iter_jsonl(path):
        if isinstance(record, json.JSONDecodeError):
            raise _bad(path, lineno, None, record.msg)
        yield lineno, record


def _score_ranks(scores: Sequence[float]) -> list[int]:
    """Rank of each triple by score, highest first; equal scores keep file order (the earlier
    line ranks higher), so a file ranks the same however its writer ordered it."""
    values = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-values, kind="stable")
    ranks = np.empty(len(values), dtype=np.int64)
    ranks[order] = np.arange(len(values))
    return ranks.tolist()


@dataclass
class FileRows:
    """The rows of a results or labels file, checked for form (ids, triples, scores) but not yet
    against a split: read before the KG index loads, so a malformed file is refused before that work."""

    path: Path
    rows: list[tuple[int, str, dict, list, Sequence[int]]]  # (line, id, raw row, triples, rank of each)


def parse_triple_file(path: str | Path, check_scores: bool = False) -> FileRows:
    """Every ``{"id", "triples", ["scores"]}`` row of ``path``, each checked for form: a bad row is a
    `TripleFileError` naming file, line and id. ``check_scores``: a row's ``scores`` (one finite
    number per triple) rank its triples; without, file order does."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    rows = []
    for lineno, raw in _iter_rows(path):
        qid = raw.get("id") if isinstance(raw, dict) else None
        if not isinstance(raw, dict) or not isinstance(qid, str):
            raise _bad(path, lineno, None, "expected an object with a string 'id'")
        trips = raw.get("triples")
        if not isinstance(trips, list) or not all(
            isinstance(x, (list, tuple)) and len(x) == 3 and all(isinstance(s, str) for s in x) for x in trips
        ):
            raise _bad(path, lineno, qid, "'triples' must be a list of [head, relation, tail] strings")
        order: Sequence[int] = range(len(trips))
        if check_scores and "scores" in raw:
            order = _checked_score_ranks(path, lineno, qid, raw["scores"], trips)
        rows.append((lineno, qid, raw, trips, order))
    return FileRows(path, rows)


def _checked_score_ranks(path: Path, lineno: int, qid: str, sc: Any, trips: list) -> list[int]:
    if (
        not isinstance(sc, list)
        or len(sc) != len(trips)
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in sc)
    ):
        raise _bad(path, lineno, qid, f"'scores' must be {len(trips)} numbers, one per triple")
    bad = [i for i, v in enumerate(sc) if not math.isfinite(v)]
    if bad:
        raise _bad(
            path,
            lineno,
            qid,
            f"'scores' must be finite: triple #{bad[0]} {trips[bad[0]]!r} has score {sc[bad[0]]} ({len(bad)} such)",
        )
    return _score_ranks(sc)


def read_triple_rows(
    path: str | Path | FileRows,
    split: SplitGraphs,
    stats: MatchStats,
    skip_unknown: bool = False,
    check_scores: bool = False,
    skip_option: str = "skip_unknown",
) -> TripleRows:
    """Read and validate ``{"id", "triples", ...}`` rows of one split (results or labels); ``path``
    may be the file already read (`parse_triple_file`).

    ``skip_option``: how the caller's user spells ``skip_unknown`` (``--skip-unknown`` on a command
    line), named in the errors."""
    parsed = path if isinstance(path, FileRows) else parse_triple_file(path, check_scores)
    stats.path = str(parsed.path)
    position = split.position()
    question: list[int] = []
    rank: list[int] = []
    triples: list[list[str]] = []
    lines: list[int] = []
    rows: dict[int, dict] = {}
    for lineno, qid, raw, trips, order in parsed.rows:
        q = position.get(qid)
        if q is None:
            stats.unknown_ids += 1
            msg = f"{parsed.path}: line {lineno}: id {qid!r} is not in the split"
            if not skip_unknown:
                raise TripleFileError(f"{msg} (pass {skip_option} to count and skip it)")
            stats.note(msg)
            continue
        if q in rows:
            raise _bad(parsed.path, lineno, qid, "duplicate id")
        stats.rows += 1
        rows[q] = raw
        question.extend([q] * len(trips))
        rank.extend(order)
        triples.extend(trips)
        lines.extend([lineno] * len(trips))
    stats.triples += len(triples)
    stats.missing_questions = len(split) - len(rows)
    return TripleRows(
        torch.tensor(question, dtype=torch.long), torch.tensor(rank, dtype=torch.long), triples, lines, rows
    )


def match_rows(
    matcher: EdgeMatcher,
    parsed: TripleRows,
    stats: MatchStats,
    skip_unknown: bool = False,
    skip_option: str = "skip_unknown",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Edge id of each parsed triple and the mask of those found; errors name the first miss."""
    edges = matcher.match(parsed.question, parsed.triples)
    found = edges >= 0
    missing = (~found).nonzero().flatten().tolist()
    stats.unmatched_triples += len(missing)
    stats.matched += int(found.sum())
    split = matcher.split
    for j in missing[: 10 if skip_unknown else 1]:
        q = int(parsed.question[j])
        msg = (
            f"{stats.path}: line {parsed.line[j]} (id {split.ids[q]!r}): triple "
            f"{list(parsed.triples[j])!r} is not in the question's graph"
        )
        if not skip_unknown:
            more = f" ({len(missing)} such triples in the file; pass {skip_option} to count and skip them)"
            raise TripleFileError(msg + more)
        stats.note(msg)
    return edges, found


# --------------------------------------------------------------------------- results


def _name_chain(index: KGIndex, chain: Mapping) -> dict:
    """Chains may hold global ids or names; the file always holds names."""
    if not isinstance(chain, Mapping) or "chain" not in chain:
        raise ValueError(f"a chain must be a mapping with 'chain' (and 'topic', 'score'), got {chain!r}")
    out = dict(chain)
    out["chain"] = [index.relations[int(r)] if isinstance(r, Integral) else str(r) for r in chain["chain"]]
    if isinstance(out.get("topic"), Integral):
        out["topic"] = index.entities[int(out["topic"])]
    if "score" in out:
        out["score"] = float(out["score"])
    return out


def write_results(
    path: str | Path,
    index: KGIndex,
    split_name: str,
    scores: torch.Tensor,
    k: int,
    chains: Sequence[Sequence[Mapping]] | None = None,
    extra: Mapping[str, Sequence[Any]] | None = None,
    chunk_size: int = 256,
) -> int:
    """Write the top-``k`` triples of every question (best first; ``-inf`` never written).

    ``chains``: per question, a list of ``{"topic", "chain", "score"}`` (ids or names);
    ``extra``: more per-question fields, ``{name: [value per question]}``. Every question of
    the split gets a row (possibly empty), so "retrieved nothing" differs from "missing".
    Returns the number of rows written; the file is replaced atomically.
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    split = index[split_name]
    num_q = len(split)
    if bool(torch.isposinf(scores).any()):
        raise ValueError("scores contain +inf, which JSON cannot hold; use finite values (or -inf = not retrieved)")
    if chains is not None and len(chains) != num_q:
        raise ValueError(f"chains must have one list per question ({num_q}), got {len(chains)}")
    extra = dict(extra or {})
    for name, values in extra.items():
        if name in RESERVED:
            raise ValueError(f"extra field {name!r} clashes with a result field {RESERVED}")
        if len(values) != num_q:
            raise ValueError(f"extra field {name!r} must have one value per question ({num_q}), got {len(values)}")
    ranks = edge_ranks(split, scores, "cpu", chunk_size, max_rank=k)
    chosen = (ranks < k).nonzero().flatten()
    owner = split.edge_owner(chosen)
    order = torch.argsort(owner * k + ranks[chosen])  # by question, then rank
    chosen = chosen[order]
    per_q = torch.bincount(owner[order], minlength=num_q).tolist()
    trip = split.global_edges_at(chosen).numpy()
    # names of the written triples only (the vocabularies are memory-mapped, millions long)
    heads, rels, tails = (
        index.entities.take(trip[:, 0]),
        index.relations.take(trip[:, 1]),
        index.entities.take(trip[:, 2]),
    )
    names = [list(t) for t in zip(heads, rels, tails)]
    values = scores.detach().double().cpu()[chosen].tolist()

    def rows():
        start = 0
        for q in range(num_q):
            end = start + per_q[q]
            row = {"id": split.ids[q], "triples": names[start:end], "scores": values[start:end]}
            if chains is not None:
                row["chains"] = [_name_chain(index, c) for c in chains[q]]
            for name, vals in extra.items():
                row[name] = vals[q]
            yield row
            start = end

    n = write_jsonl(path, rows())
    log.info("wrote top-%d triples of %d questions to %s", k, n, path)
    return n


def read_results(
    path: str | Path | FileRows,
    index: KGIndex,
    split_name: str,
    skip_unknown: bool = False,
    stats: MatchStats | None = None,
    skip_option: str = "skip_unknown",
) -> tuple[torch.Tensor, list[list[dict]]]:
    """Map a results file (or its rows, already read: `parse_triple_file`) back onto the split's edges.

    Returns ``scores`` (FloatTensor[sum E]: listed triples get ``-rank``, unlisted edges
    ``-inf``) and ``chains`` (per question, ``[]`` if none). A row's triples rank by their
    ``scores`` (highest first; equal scores: the earlier line first) when the row has scores,
    else in file order; a non-finite score (NaN, inf) is an error naming the question.
    Unknown ids or triples not in the question's graph raise `TripleFileError` naming
    file, line, id and triple, or are counted in ``stats`` with ``skip_unknown``. Questions
    missing from the file retrieve nothing (counted, logged).
    """
    split = index[split_name]
    stats = stats if stats is not None else MatchStats()
    parsed = read_triple_rows(path, split, stats, skip_unknown, check_scores=True, skip_option=skip_option)
    edges, found = match_rows(EdgeMatcher(index, split), parsed, stats, skip_unknown, skip_option)
    num_e = int(split.edge_ptr[-1]) if len(split) else 0
    scores = torch.full((num_e,), -math.inf, dtype=torch.float32)
    if bool(found.any()):
        hit = edges[found]  # a triple listed twice keeps its better rank; unlisted edges stay -inf
        scores[hit] = scatter(-parsed.rank[found].float(), hit, 0, dim_size=num_e, reduce="max")[hit]
    stats.duplicate_triples += int(found.sum()) - int((scores > -math.inf).sum())
    chains: list[list[dict]] = [[] for _ in range(len(split))]
    for q, raw in parsed.rows.items():
        c = raw.get("chains", [])
        if not isinstance(c, list):
            raise TripleFileError(f"{stats.path}: id {split.ids[q]!r}: 'chains' must be a list")
        chains[q] = c
    if stats.missing_questions:
        log.warning(
            "%s: %d of %d questions of split %r are missing; they count as retrieving nothing",
            stats.path,
            stats.missing_questions,
            len(split),
            split_name,
        )
    if stats.unknown_ids or stats.unmatched_triples:
        log.warning("%s", stats.summary())
    return scores, chains
