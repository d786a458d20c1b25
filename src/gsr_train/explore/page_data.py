"""What an explorer page holds: a columnar summary of every question (loaded with the page) and each
question's detail in compressed chunks (unpacked in the browser only when a question is opened).

The detail of a question is the part of its graph that matters: every view's top triples, the
shortest-path triples from its topic entities to its answers (at most ``SP_EDGES``), topic and answer
entities, plus the view's own fields (GSR's chains and beams, paths, a reader's answer). Edges are
positions of the split, so the union over views is one ``np.unique``; names are interned per chunk.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gsr_train.eval.compare import compare_runs
from gsr_train.eval.intervals import QuestionValues
from gsr_train.eval.tail import MetricsFileError
from gsr_train.explore.ranked import RankedTriples, masked_nodes, read_ranked
from gsr_train.explore.sources import ExploredRun, ExploreError, View, row_labels
from gsr_train.io import iter_jsonl
from gsr_train.kg.index import KGIndex, SplitGraphs
from gsr_train.kg.paths import Supervision, chain_names, get_supervision
from gsr_train.runtime.run_data import cache_dir, load_kg_index

CHUNK = 256  # questions per compressed detail chunk
SP_EDGES = 20  # shortest-path triples kept per question
TRIPLE_FIELDS = ("chains", "beams", "paths")  # a results row's own fields shown with its question
PREDICTION_FIELDS = ("prediction", "response", "evidence_shown", "evidence_total")
LIST_CAP = 10  # items of a list field kept per question
EVIDENCE_CHARS = 2000  # an open-ended answer's evidence, as shown


@dataclass
class PageInputs:
    """What a page is made from. ``position``: each question's row on the page: the split's questions,
    then those only a reader or an open-ended run asked (OKGQA's own questions), which have no graph."""

    runs: list[ExploredRun]
    index: KGIndex
    split: str
    supervision: Supervision
    top: int
    position: dict[str, int] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.position = self.position or self.index[self.split].position()

    def place(self, qid: str, question: Any) -> int:
        """The page row of question ``qid``; a question outside the split gets a row of its own."""
        if qid not in self.position:
            self.position[qid] = len(self.position)
            self.extra[qid] = str(question or "")
        return self.position[qid]


def page_inputs(runs: list[ExploredRun], split: str, top: int) -> PageInputs:
    """The page's inputs from the first run's data: its KG index (the split checked to hold questions)
    and the split's shortest-path supervision."""
    cfg = runs[0].config
    index = load_kg_index(cfg, evaluate=[split])
    return PageInputs(runs, index, split, get_supervision(index, split, cache_dir(cfg)), top)


def _round(values: np.ndarray) -> list:
    return [None if not math.isfinite(v) else round(float(v), 4) for v in values.tolist()]


def _aligned(values: QuestionValues, position: dict[str, int], n: int) -> dict[str, list]:
    """Each metric's per-question value, in split order (null: not counted, or not in the run)."""
    at = np.array([position.get(q, -1) for q in values.ids], dtype=np.int64)
    inside = at >= 0
    out = {}
    for name in values.parts:
        column = np.full(n, np.nan)
        column[at[inside]] = values.per_question(name).numpy()[inside]
        out[name] = _round(column)
    return out


def _field_rows(view: View, inputs: PageInputs, fields: Sequence[str], new_rows: bool) -> dict[int, dict]:
    """The view file's own fields per question (lists capped at ``LIST_CAP``); ``new_rows``: a question
    outside the split gets a page row (a reader's), else it is left out (a results row cannot be)."""
    out: dict[int, dict] = {}
    assert view.file is not None
    for lineno, row in iter_jsonl(view.file):
        if not isinstance(row, dict):
            raise ExploreError(f"{view.file}: line {lineno}: not a JSON object")
        qid = str(row.get("id"))
        q = inputs.place(qid, row.get("question")) if new_rows else inputs.position.get(qid)
        kept = {f: row[f] for f in fields if f in row}
        if q is not None and kept:
            out[q] = {f: v[:LIST_CAP] if isinstance(v, list) else v for f, v in kept.items()}
    return out


def _judged_rows(view: View, inputs: PageInputs) -> dict[int, dict]:
    """An open-ended condition's judged answers: the answer, its facts (supported or not), G-Eval."""
    out: dict[int, dict] = {}
    assert view.file is not None
    condition = view.row.get("condition")
    for lineno, row in iter_jsonl(view.file):
        if not isinstance(row, dict):
            raise ExploreError(f"{view.file}: line {lineno}: not a JSON object")
        if row.get("condition") != condition:
            continue
        q = inputs.place(str(row.get("id")), row.get("question"))
        out[q] = {
            "answer_text": row.get("answer"),
            "facts": (row.get("facts") or [])[:LIST_CAP],
            "evidence": str(row.get("evidence") or "")[:EVIDENCE_CHARS],
            "geval": row.get("geval") or {},
        }
    return out


def _has_fields(view: View, fields: Sequence[str]) -> bool:
    assert view.file is not None
    for _, row in iter_jsonl(view.file):
        return isinstance(row, dict) and any(f in row for f in fields)
    return False


@dataclass
class ViewData:
    view: View
    ranked: RankedTriples | None
    fields: dict[int, dict]


def read_view(view: View, inputs: PageInputs) -> ViewData:
    if view.kind == "predictions":
        fields = _field_rows(view, inputs, ("id", *PREDICTION_FIELDS), new_rows=True)
        if not fields:
            raise ExploreError(f"{view.file}: no predictions in it")
        return ViewData(view, None, fields)
    if view.kind == "open_ended":
        return ViewData(view, None, _judged_rows(view, inputs))
    if view.kind == "none":
        return ViewData(view, None, {})
    assert view.file is not None
    ranked = read_ranked(view.file, inputs.index, inputs.split, inputs.top)
    if int((ranked.returned >= 0).sum()) == 0:
        raise ExploreError(
            f"{view.file}: no row names a question of split {inputs.split!r} "
            f"({ranked.unknown_ids} rows of other ids: a results file of another split?)"
        )
    fields = _field_rows(view, inputs, TRIPLE_FIELDS, new_rows=False) if _has_fields(view, TRIPLE_FIELDS) else {}
    return ViewData(view, ranked, fields)


def _view_summary(data: ViewData, position: dict[str, int], n: int) -> dict[str, Any]:
    view = data.view
    out: dict[str, Any] = {
        "run": view.run,
        "label": view.label,
        "kind": view.kind,
        "row": row_labels(view.row),
        "metrics": view.row.get("metrics") or {},
        "intervals": view.row.get("intervals") or {},
        "values": _aligned(view.values, position, n) if view.values is not None else _judged_values(data, n),
    }
    if data.ranked is not None:
        pad = [None] * (n - data.ranked.first_answer.size)
        out["first"] = [None if r < 0 else int(r) + 1 for r in data.ranked.first_answer.tolist()] + pad
        out["returned"] = [None if r < 0 else int(r) for r in data.ranked.returned.tolist()] + pad
    if view.kind == "predictions":
        out["answer"] = [_answer_text(data.fields.get(q)) for q in range(n)]
    return out


def _judged_values(data: ViewData, n: int) -> dict[str, list]:
    """An open-ended view's per-question figures from its judged answers (its run keeps no
    ``questions.jsonl``): each verifier's share of facts supported, and each G-Eval rating."""
    if data.view.kind != "open_ended":
        return {}
    out: dict[str, list] = {}
    for q, row in data.fields.items():
        facts = row.get("facts") or []
        for verifier in ("encoder", "llm"):
            marks = [f.get(f"{verifier}_supported") for f in facts if f.get(f"{verifier}_supported") is not None]
            if marks:
                out.setdefault(f"supported_{verifier}", [None] * n)[q] = round(sum(marks) / len(marks), 4)
        for criterion, rating in (row.get("geval") or {}).items():
            if isinstance(rating, dict) and isinstance(rating.get("rating"), (int, float)):
                out.setdefault(f"geval_{criterion}", [None] * n)[q] = rating["rating"]
    return out


def _answer_text(row: dict | None) -> str | None:
    if not row:
        return None
    pred = row.get("prediction")
    return "; ".join(map(str, pred[:3])) if isinstance(pred, list) else str(pred or "")


def summary(inputs: PageInputs, views: Sequence[ViewData]) -> dict[str, Any]:
    """The per-question table of the page (columns, in page order) and the runs' main rows."""
    graphs = inputs.index[inputs.split]
    n, extra = len(inputs.position), list(inputs.extra)
    topics = _names_per_question(inputs.index, graphs, graphs.topic_mask.numpy())
    chains = [" > ".join(chain_names(c[0], inputs.index)) if c else "" for c in inputs.supervision.chains_raw]
    none: list[list[str]] = [[] for _ in extra]
    return {
        "split": inputs.split,
        "runs": [_run_line(r) for r in inputs.runs],
        "ids": list(graphs.ids) + extra,
        "questions": list(graphs.questions) + [inputs.extra[q] for q in extra],
        "answers": [a[:5] for a in graphs.answers] + none,
        "n_answers": [len(a) for a in graphs.answers] + [0] * len(extra),
        "topics": topics + none,
        "hops": inputs.supervision.hops.tolist() + [-1] * len(extra),
        "edges": graphs.num_edges.tolist() + [0] * len(extra),
        "chain": chains + [""] * len(extra),
        "views": [_view_summary(v, inputs.position, n) for v in views],
        "paired": paired_tables(inputs.runs, views),
    }


def paired_tables(runs: Sequence[ExploredRun], views: Sequence[ViewData]) -> list[dict[str, Any]]:
    """``gsr-train compare`` of the first run with each other one, its rows pointing at the page's views
    (two runs with no row of the same kind, or without per-question values, have no table: a note)."""
    at = {(v.view.run, v.view.index): i for i, v in enumerate(views)}
    out: list[dict[str, Any]] = []
    for number, other in enumerate(runs[1:], start=1):
        table: dict[str, Any] = {"a": runs[0].name, "b": other.name, "rows": []}
        try:
            doc = compare_runs(runs[0].folder, other.folder)
        except (ValueError, FileNotFoundError, MetricsFileError) as e:
            out.append({**table, "note": str(e).splitlines()[0]})
            continue
        for r in doc["rows"]:
            a, b = at.get((0, r["row_a"])), at.get((number, r["row_b"]))
            if a is not None and b is not None:
                table["rows"].append({"a": a, "b": b, "metrics": r["metrics"]})
        out.append(table)
    return out


def _run_line(run: ExploredRun) -> dict[str, Any]:
    data = run.metrics.get("dataset") or {}
    return {
        "name": run.name,
        "folder": str(run.folder),
        "experiment": run.metrics.get("experiment"),
        "dataset": data.get("name"),
    }


def _names_per_question(index: KGIndex, graphs: SplitGraphs, mask: np.ndarray) -> list[list[str]]:
    """The names of the masked nodes of each question (its topic entities)."""
    owner, ids = masked_nodes(graphs, mask)
    names = index.entities.take(ids) if ids.size else []
    bounds = np.searchsorted(owner, np.arange(len(graphs) + 1))
    return [names[bounds[q] : bounds[q + 1]] for q in range(len(graphs))]


def encode_chunk(doc: dict) -> str:
    """A chunk as the page keeps it: gzip'd JSON in base64 (the browser's DecompressionStream unpacks it)."""
    raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")


@dataclass
class UnionEdges:
    """The edges a page keeps (sorted split positions), their owners, global ids and flags, and each
    triples view's rank and score of them (-1 / NaN: not among its top triples)."""

    edge: np.ndarray
    owner: np.ndarray
    hrt: np.ndarray  # [M, 3] global ids
    flags: np.ndarray  # bit 1: on a shortest path, bit 2: bears an answer
    ranks: list[np.ndarray | None]
    scores: list[np.ndarray | None]


def _capped_per_owner(edges: np.ndarray, ptr: np.ndarray, cap: int) -> np.ndarray:
    """The first ``cap`` of each question's edges (``edges`` sorted)."""
    owner = np.searchsorted(ptr, edges, side="right") - 1
    starts = np.searchsorted(owner, owner, side="left")
    return edges[np.arange(edges.size) - starts < cap]


def _best_of_view(ranked: RankedTriples) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A view's in-graph top triples, one per edge (its best rank)."""
    kept = ranked.edge >= 0
    edge, rank, score = ranked.edge[kept], ranked.rank[kept], ranked.score[kept]
    order = np.lexsort((rank, edge))
    edge, rank, score = edge[order], rank[order], score[order]
    first = np.ones(edge.size, dtype=bool)
    first[1:] = edge[1:] != edge[:-1]
    return edge[first], rank[first], score[first]


def union_edges(inputs: PageInputs, views: Sequence[ViewData]) -> UnionEdges:
    import torch

    graphs = inputs.index[inputs.split]
    ptr = graphs.edge_ptr.numpy()
    label = inputs.supervision.triple_label.numpy()
    best = [_best_of_view(v.ranked) if v.ranked is not None else None for v in views]
    sp = _capped_per_owner(np.flatnonzero(label), ptr, SP_EDGES)
    edge = np.unique(np.concatenate([sp, *(b[0] for b in best if b is not None)]).astype(np.int64))
    owner = np.searchsorted(ptr, edge, side="right") - 1
    hrt = graphs.global_edges_at(torch.from_numpy(edge)).numpy()
    base = graphs.ent_ptr.numpy()[owner]
    answer = graphs.answer_mask.numpy()
    heads, tails = graphs.edge_index[0].numpy()[edge] + base, graphs.edge_index[1].numpy()[edge] + base
    flags = label[edge].astype(np.int8) | ((answer[heads] | answer[tails]).astype(np.int8) << 1)
    ranks: list[np.ndarray | None] = []
    scores: list[np.ndarray | None] = []
    for b in best:
        if b is None:
            ranks.append(None)
            scores.append(None)
            continue
        at = np.searchsorted(edge, b[0])
        r, s = np.full(edge.size, -1, dtype=np.int64), np.full(edge.size, np.nan)
        r[at], s[at] = b[1], b[2]
        ranks.append(r)
        scores.append(s)
    return UnionEdges(edge, owner, hrt, flags, ranks, scores)


def _ptr(owner: np.ndarray, q0: int, q1: int) -> np.ndarray:
    return np.searchsorted(owner, np.arange(q0, q1 + 1))


def detail_chunks(inputs: PageInputs, views: Sequence[ViewData]) -> list[str]:
    """Every question's detail, ``CHUNK`` questions per encoded chunk."""
    graphs = inputs.index[inputs.split]
    u = union_edges(inputs, views)
    topic = masked_nodes(graphs, graphs.topic_mask.numpy())
    answer = masked_nodes(graphs, graphs.answer_mask.numpy())
    n = len(inputs.position)
    return [_chunk(inputs, views, u, topic, answer, q0, min(q0 + CHUNK, n)) for q0 in range(0, n, CHUNK)]


def _chunk(inputs: PageInputs, views: Sequence[ViewData], u: UnionEdges, topic, answer, q0: int, q1: int) -> str:
    e_ptr, t_ptr, a_ptr = _ptr(u.owner, q0, q1), _ptr(topic[0], q0, q1), _ptr(answer[0], q0, q1)
    e = slice(int(e_ptr[0]), int(e_ptr[-1]))
    hrt = u.hrt[e]
    topics, answers = topic[1][t_ptr[0] : t_ptr[-1]], answer[1][a_ptr[0] : a_ptr[-1]]
    ents, inverse = np.unique(np.concatenate([hrt[:, 0], hrt[:, 2], topics, answers]), return_inverse=True)
    rels, rel_inverse = np.unique(hrt[:, 1], return_inverse=True)
    m, nt = hrt.shape[0], topics.size
    doc = {
        "q0": q0,
        "names": inputs.index.entities.take(ents) if ents.size else [],
        "rels": inputs.index.relations.take(rels) if rels.size else [],
        "ptr": (e_ptr - e_ptr[0]).tolist(),
        "h": inverse[:m].tolist(),
        "t": inverse[m : 2 * m].tolist(),
        "r": rel_inverse.tolist(),
        "flags": u.flags[e].tolist(),
        "topic_ptr": (t_ptr - t_ptr[0]).tolist(),
        "topic": inverse[2 * m : 2 * m + nt].tolist(),
        "answer_ptr": (a_ptr - a_ptr[0]).tolist(),
        "answer": inverse[2 * m + nt :].tolist(),
        "views": [
            None if r is None or s is None else {"rank": r[e].tolist(), "score": _round(s[e])}
            for r, s in zip(u.ranks, u.scores)
        ],
        "fields": [{str(q - q0): v.fields[q] for q in range(q0, q1) if q in v.fields} for v in views],
    }
    return encode_chunk(doc)
