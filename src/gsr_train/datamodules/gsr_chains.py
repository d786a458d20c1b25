"""GSR retrieval data, question -> relation chains: chain-supervision rows (``webqsp_paths``),
LLM-selected chains, the ``filtered`` heuristic, and the per-question chains of RoG datasets
(from the KG supervision). See `gsr_train.datamodules.gsr_data` for the variants."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gsr_train.data.rows import RowError, find_split_file
from gsr_train.io import iter_jsonl
from gsr_train.kg.index import KGIndex

log = logging.getLogger(__name__)

Chain = tuple[str, ...]
VARIANTS = ("raw", "filtered", "llm")
META_PREFIXES = ("common.", "freebase.", "type.", "kg.", "user.", "dataworld.", "base.type_ontology.")


# ----------------------------------------------------------------------- path rows
@dataclass
class PathRow:
    """A row of a chain-supervision file (``webqsp_paths``): no graph, only chains."""

    id: str
    question: str
    ground_paths: list[Chain]
    llm_paths: list[Chain] | None = None  # ``llm_paths`` or ``gpt_paths`` when present


def _chains_field(value: Any, source: str, row_id: str, name: str) -> list[Chain]:
    if not isinstance(value, list):
        raise RowError(source, row_id, name, f"expected a list of relation lists, got {type(value).__name__}")
    out = []
    for k, chain in enumerate(value):
        if not isinstance(chain, list) or not all(isinstance(r, str) and r and not r.isspace() for r in chain):
            raise RowError(source, row_id, name, f"chain #{k} is not a list of relation names: {chain!r}")
        out.append(tuple(chain))
    return out


def _jsonl_records(path: Path):
    for lineno, record in iter_jsonl(path):
        if isinstance(record, json.JSONDecodeError):
            raise RowError(str(path), f"line {lineno}", "<json>", record.msg)
        yield lineno, record


def load_path_rows(source: str | Path, split: str | None = None) -> list[PathRow]:
    """Rows ``{id, question, ground_paths[, gpt_paths | llm_paths]}`` from a folder + split or a file.

    Every row is validated; errors name the file, the row id and the field.
    """
    path = Path(source)
    if path.is_dir():
        if split is None:
            raise ValueError(f"{path} is a folder: give the split to read")
        path = find_split_file(path, split)
    if not path.exists():
        raise FileNotFoundError(f"chain-supervision file {path} does not exist")
    rows, seen = [], set()
    for lineno, raw in _jsonl_records(path):
        where = f"line {lineno}"
        if not isinstance(raw, dict):
            raise RowError(str(path), where, "<row>", f"expected a JSON object, got {type(raw).__name__}")
        rid = raw.get("id")
        if not isinstance(rid, str) or not rid:
            raise RowError(str(path), where, "id", "missing or not a non-empty string")
        if rid in seen:
            raise RowError(str(path), rid, "id", "duplicate id")
        seen.add(rid)
        question = raw.get("question")
        if not isinstance(question, str) or not question.strip():
            raise RowError(str(path), rid, "question", "missing or empty")
        if "ground_paths" not in raw:
            raise RowError(str(path), rid, "ground_paths", "missing")
        ground = _chains_field(raw["ground_paths"], str(path), rid, "ground_paths")
        llm = None
        for name in ("llm_paths", "gpt_paths"):
            if name in raw and raw[name] is not None:
                llm = _chains_field(raw[name], str(path), rid, name)
                break
        rows.append(PathRow(rid, question, ground, llm))
    log.info("%s: %d chain-supervision rows", path, len(rows))
    return rows


def load_llm_chains(path: str | Path) -> dict[str, list[Chain]]:
    """LLM-selected chains per question id from rows with ``llm_paths`` (or ``gpt_paths``)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"LLM-selected chains file {path} does not exist")
    out: dict[str, list[Chain]] = {}
    for lineno, raw in _jsonl_records(path):
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            raise RowError(str(path), f"line {lineno}", "id", "missing or not a string")
        for name in ("llm_paths", "gpt_paths"):
            if name in raw:
                out[raw["id"]] = _chains_field(raw[name], str(path), raw["id"], name)
                break
        else:
            raise RowError(str(path), raw["id"], "llm_paths", "missing (expected llm_paths or gpt_paths)")
    return out


def filter_chains(
    chains: Iterable[Chain], drop_repeats: bool = True, drop_prefixes: Sequence[str] = META_PREFIXES
) -> list[Chain]:
    """The direction-free ``filtered`` heuristic (see the module docstring); empty chains dropped."""
    out = []
    prefixes = tuple(drop_prefixes or ())
    for c in chains:
        if not c:
            continue
        if drop_repeats and any(a == b for a, b in zip(c, c[1:])):
            continue
        if prefixes and any(r.startswith(prefixes) for r in c):
            continue
        out.append(tuple(c))
    return out


def _dedup(chains: Iterable[Chain]) -> list[Chain]:
    return list(dict.fromkeys(tuple(c) for c in chains if len(c)))


# ----------------------------------------------------------------------- questions
@dataclass
class ChainQuestion:
    """One question with its training chains (chosen variant) and its ground chains (for metrics)."""

    id: str
    question: str
    chains: list[Chain]
    ground: list[Chain]


def questions_from_paths(
    rows: Sequence[PathRow],
    variant: str = "raw",
    llm: Mapping[str, list[Chain]] | None = None,
    filter_options: Mapping[str, Any] | None = None,
) -> list[ChainQuestion]:
    """ChainQuestions from path rows; ``llm`` (id -> chains) overrides the rows' own gpt/llm paths."""
    if variant not in VARIANTS:
        raise ValueError(f"retrieval variant must be one of {VARIANTS}, got {variant!r}")
    out = []
    missing = 0
    for row in rows:
        if variant == "raw":
            chains = _dedup(row.ground_paths)
        elif variant == "filtered":
            chains = _dedup(filter_chains(row.ground_paths, **dict(filter_options or {})))
        else:
            chosen = llm.get(row.id) if llm is not None else row.llm_paths
            if chosen is None:
                missing += 1
                chosen = []
            chains = _dedup(chosen)
        out.append(ChainQuestion(row.id, row.question, chains, _dedup(row.ground_paths)))
    if variant == "llm" and missing:
        log.warning("%d of %d questions have no LLM-selected chains (trained without them)", missing, len(rows))
    return out


def questions_from_kg(
    index: KGIndex, split: str, supervision, variant: str = "raw", llm: Mapping[str, list[Chain]] | None = None
) -> list[ChainQuestion]:
    """ChainQuestions of a RoG split from its shortest-path supervision (``kg.paths``)."""
    if variant not in VARIANTS:
        raise ValueError(f"retrieval variant must be one of {VARIANTS}, got {variant!r}")
    if variant == "llm" and llm is None:
        raise ValueError("retrieval variant 'llm' needs a file of LLM-selected chains (gsr.llm_chains=...)")
    graphs = index[split]
    names = index.relations
    out = []
    for i, (qid, q) in enumerate(zip(graphs.ids, graphs.questions)):
        raw = [tuple(names[r] for r in c) for c in supervision.chains_raw[i]]
        if variant == "raw":
            chains = raw
        elif variant == "filtered":
            chains = [tuple(names[r] for r in c) for c in supervision.chains_filtered[i]]
        else:
            assert llm is not None  # checked on entry for the llm variant
            chains = list(llm.get(qid, []))
        out.append(ChainQuestion(qid, q, _dedup(chains), _dedup(raw)))
    return out


def chain_relations(questions: Iterable[ChainQuestion], ground: bool = False) -> list[str]:
    """Relation names used by the training chains (``ground=True``: by the ground chains too)."""
    seen: dict[str, None] = {}
    for q in questions:
        for c in (q.chains + q.ground) if ground else q.chains:
            for r in c:
                seen.setdefault(r, None)
    return list(seen)
