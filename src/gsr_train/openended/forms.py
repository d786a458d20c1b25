"""The evidence a long-form reader sees, in OKGQA's three retrieval forms (paper sec. 4.1):

* ``triplets``: the top triples of the classic triplet retriever, one ``(h, r, t)`` line each;
* ``paths``: the prize-cost paths of the classic path retriever, one ``a -> r -> b <- r2 <- c``
  line per path (consecutive retrieved edges that chain are one path);
* ``subgraphs``: the prize-collecting Steiner tree, textualised as G-Retriever does (a node table
  and an edge table), so the reader sees one connected graph rather than a list;
* ``none``: closed book.

Scores come from `gsr_train.retrievers.classic.classic_scores` (``-inf``: not retrieved), or
from any retriever's results file (its ranked triples, as ``triplets`` lines).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from gsr_train.kg.index import SplitGraphs
from gsr_train.retrievers.classic import classic_scores

FORMS = ("none", "triplets", "paths", "subgraphs")
CLASSIC_METHOD = {"triplets": "triplets", "paths": "paths", "subgraphs": "pcst"}


def check_forms(forms: Sequence[str], results: Mapping[str, Any] | None = None) -> None:
    """A form that is neither one of `FORMS` nor a label of ``results`` is one clear error."""
    known = set(FORMS) | set(results or {})
    bad = [f for f in forms if f not in known]
    if bad:
        raise ValueError(
            f"open_ended.forms: unknown form(s) {bad}; known: {', '.join(FORMS)} or a label of open_ended.results"
        )
    if not forms:
        raise ValueError("open_ended.forms is empty: name at least one of " + ", ".join(FORMS))


def form_scores(
    split: SplitGraphs, question_emb: torch.Tensor, emb, form: str, options: Mapping | None
) -> torch.Tensor:
    """Per-edge scores of the classic retriever behind ``form`` for every question of ``split``."""
    return classic_scores(split, question_emb, emb, CLASSIC_METHOD[form], options)


def _ranked_edges(scores: torch.Tensor, e0: int, e1: int, top_k: int) -> list[int]:
    """Local edge ids of the best ``top_k`` retrieved edges of one question, best first."""
    s = scores[e0:e1]
    kept = torch.nonzero(s > float("-inf")).view(-1)
    order = kept[torch.argsort(s[kept], descending=True, stable=True)]
    return order[:top_k].tolist()


def evidence_text(
    split: SplitGraphs, q: int, scores: torch.Tensor, form: str, top_k: int, entities, relations
) -> list[str]:
    """The evidence lines of question ``q`` in ``form`` (at most ``top_k`` edges)."""
    if form == "none":
        return []
    e0, e1 = int(split.edge_ptr[q]), int(split.edge_ptr[q + 1])
    edges = torch.as_tensor(_ranked_edges(scores, e0, e1, top_k), dtype=torch.long) + e0
    heads, tails = split.edge_index[0, edges].tolist(), split.edge_index[1, edges].tolist()  # local node ids
    ids = split.entity_ids[int(split.ent_ptr[q]) + torch.as_tensor(heads + tails, dtype=torch.long)].tolist()
    name = dict(zip(heads + tails, (entities[i] for i in ids))).__getitem__  # only the retrieved edges' names
    triples = [(h, relations[int(r)], t) for h, r, t in zip(heads, split.edge_rel[edges].tolist(), tails)]
    if form == "paths":
        return _path_lines(triples, name)
    if form == "subgraphs":
        return _subgraph_lines(triples, name)
    return [f"({name(h)}, {r}, {name(t)})" for h, r, t in triples]


def _path_lines(triples: Sequence[tuple[int, str, int]], name) -> list[str]:
    """Chain consecutive edges that share the path's last node into one line (the retriever lists
    each path's edges in order, best path first)."""
    lines, end, text = [], None, ""
    for h, r, t in triples:
        if end is not None and end in (h, t):
            text += f" -> {r} -> {name(t)}" if h == end else f" <- {r} <- {name(h)}"
            end = t if h == end else h
            continue
        if text:
            lines.append(text)
        text, end = f"{name(h)} -> {r} -> {name(t)}", t
    if text:
        lines.append(text)
    return lines


def _subgraph_lines(triples: Sequence[tuple[int, str, int]], name) -> list[str]:
    """G-Retriever's textualisation: ``node_id,node_attr`` rows, then ``src,edge_attr,dst`` rows."""
    nodes: dict[int, int] = {}
    for h, _, t in triples:
        nodes.setdefault(h, len(nodes))
        nodes.setdefault(t, len(nodes))
    lines = ["node_id,node_attr"] + [f"{i},{name(local)}" for local, i in nodes.items()]
    lines += ["src,edge_attr,dst"] + [f"{nodes[h]},{r},{nodes[t]}" for h, r, t in triples]
    return lines if triples else []


def results_lines(rows: Mapping[str, Mapping[str, Any]], graph_id: str, top_k: int) -> list[str]:
    """A retriever's results row (``triples`` ranked best first) as ``(h, r, t)`` lines."""
    row = rows.get(graph_id)
    if row is None:
        return []
    return [f"({h}, {r}, {t})" for h, r, t in list(row.get("triples") or [])[:top_k]]
