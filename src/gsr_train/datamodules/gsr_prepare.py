"""The data of a GSR run (`GSRData`): questions with their chains, the evaluation graphs, the
KG's relations, indexing subjects and random walks. Two layouts:

* RoG datasets (graphs in the rows, `prepare_rog_data`): chains from the shortest-path
  supervision (`gsr_train.kg.paths`), graphs for execution from the KG index, ground chains
  for evaluation = the split's raw chains.
* chain-supervision files (``data.format: paths``, e.g. webqsp_paths, `prepare_paths_data`):
  chains from the rows, graphs from a RoG dataset that shares question ids (``data.graphs``,
  webqsp_mini), the evaluation questions' graphs gathered from whichever of its splits holds them.

Leave-relations-out (``gsr.holdout``, `apply_holdout`), random walks (``gsr.walks``,
`random_walks`) and the model's relation vocabulary (``gsr.relations``,
`relation_vocab`) are worked out here too. The runner (`gsr_train.runs.gsr`) opens the KG
indexes and reads the walk options, and hands them in; a mistake found here is a
`GSRDataError`, which the runner reports as its PreflightError.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from gsr_train.data.errors import UserError
from gsr_train.data.rows import find_split_file
from gsr_train.datamodules.gsr_chains import (
    ChainQuestion,
    chain_relations,
    load_llm_chains,
    load_path_rows,
    questions_from_kg,
    questions_from_paths,
)
from gsr_train.datamodules.gsr_indexing import relation_subjects
from gsr_train.datamodules.gsr_walks import STARTS, sample_walks, walk_examples, walk_summary
from gsr_train.datamodules.relation_holdout import drop_questions_using, held_out_relations
from gsr_train.eval.evaluate import DEFAULT_SPLITS
from gsr_train.features.relation_tokens import load_relation_file, merge_vocab
from gsr_train.kg.index import KGIndex, QuestionGraph, _concat
from gsr_train.kg.paths import get_supervision

log = logging.getLogger(__name__)


class GSRDataError(UserError, ValueError):
    """GSR data options or inputs that make no run (no training question left, evaluation questions
    without a graph, a vocabulary source without its file): found while preparing the data, before
    any training; the runner reports it as a PreflightError with the same message."""


class WalkSettings(Protocol):
    """``gsr.walks`` as the runner reads it (its recipe, ``gsr_train.options.recipes.GSRWalks``, holds the defaults)."""

    count: int
    ratio: float
    min_hops: int
    max_hops: int
    starts: str
    prefix: str


@dataclass(frozen=True)
class GSRSource:
    """The dataset a GSR run's data steps read, as its data file names it (the open ``data`` section),
    and the run's seed; the ``gsr`` recipe (`gsr_train.options.recipes.GSRRun`) comes beside it."""

    name: str  # data.name
    dir: str  # data.dir: the rows (chain files or a RoG dataset)
    splits: tuple[str, ...]  # data.splits
    seed: int
    graphs: str | None = None  # data.graphs: the RoG-format folder of a chain-file dataset's graphs
    graph_splits: tuple[str, ...] | None = None  # data.graph_splits (null: every split file there)
    questions_without_graph: str = "error"  # data.questions_without_graph: error | skip | keep


@dataclass
class GSRData:
    """Everything the runner needs besides the model."""

    train: list  # ChainQuestion
    validation: list
    evaluation: list
    eval_split: str
    graph_index: Any  # KGIndex with one split `eval_split` holding the evaluation graphs in order
    kg_relations: list[str]
    subjects: dict[str, list[str]] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    has_graph: list[bool] = field(default_factory=list)  # per evaluation question
    walks: list = field(default_factory=list)  # WalkExample: multi-hop random-walk training examples

    def first_questions(self, n: int) -> None:
        """Keep the first ``n`` evaluation questions and their graphs (``gsr.max_eval_questions``)."""
        self.evaluation = self.evaluation[:n]
        self.has_graph = self.has_graph[:n]
        if self.graph_index is not None:
            gi = self.graph_index
            self.graph_index = KGIndex(gi.entities, gi.relations, {"eval": gi["eval"].subset(range(n))}, {})

    def unknown_relations(self, known: set[str], examples: int = 10) -> dict:
        """Relations of the evaluation graphs and ground chains outside ``known`` (a model's relations):
        they cannot be decoded (constrained decoding skips them), so they are counted, not crashed on."""
        in_graphs: set[str] = set()
        if self.graph_index is not None:
            graphs, names = self.graph_index["eval"], self.graph_index.relations
            rel_ids = (
                torch.unique(graphs.edge_rel.long()) if graphs.edge_rel.numel() else torch.zeros(0, dtype=torch.long)
            )
            in_graphs = set(
                names.take(rel_ids.numpy()) if hasattr(names, "take") else [names[int(r)] for r in rel_ids.tolist()]
            )
        missing = sorted(in_graphs - known)
        needing = [
            q.id for q in self.evaluation if q.ground and all(any(r not in known for r in chain) for chain in q.ground)
        ]
        return {
            "kg_relations_without_token": len(missing),
            "kg_relations": len(in_graphs),
            "examples": missing[:examples],
            "eval_questions_needing_unknown": len(needing),
            "eval_question_examples": needing[:examples],
        }


def llm_chains(path: str | None):
    """``gsr.llm_chains``: the LLM-selected chains by question id, or None when no file is set."""
    if not path:
        return None

    return load_llm_chains(path)


# --------------------------------------------------------------------------- leave relations out


def apply_holdout(
    train: list, validation: list, holdout: Mapping[str, Any], extra_chains: dict | None = None
) -> tuple[list, list, dict]:
    """``holdout.fraction`` (``gsr.holdout``) of the training chains' relations held out (by name
    hash, ``holdout.seed``); every training and validation question whose ground, training or LLM
    chains use one is dropped. Returns the kept questions and the figures of the holdout."""
    fraction = float(holdout.get("fraction") or 0.0)
    if fraction <= 0.0 or not train:
        return train, validation, {}
    held = held_out_relations(chain_relations(train), fraction, int(holdout.get("seed", 0)))
    before = len(train)
    train, dropped_train = drop_questions_using(train, held, extra_chains)
    validation, dropped_val = drop_questions_using(validation, held, extra_chains)
    if not train:
        raise GSRDataError(f"gsr.holdout.fraction={fraction}: no training question is left")
    info = {
        "fraction": fraction,
        "seed": int(holdout.get("seed", 0)),
        "relations_held_out": len(held),
        "train_kept": len(train),
        "train_dropped": dropped_train,
        "validation_dropped": dropped_val,
    }
    log.info(
        "leave relations out: %d relations held out; %d of %d training questions kept", len(held), len(train), before
    )
    return train, validation, info


# --------------------------------------------------------------------------- random walks


def walk_problems(walks: WalkSettings) -> list[str]:
    """``gsr.walks`` mistakes (none when walks are off), to report before any data work."""
    if walks.count <= 0:
        return []
    problems = []
    if walks.prefix not in ("retrieval", "index"):
        problems.append(f"gsr.walks.prefix must be retrieval | index, got {walks.prefix!r}")
    if walks.starts not in ("auto", *STARTS):
        problems.append(f"gsr.walks.starts must be one of {('auto', *STARTS)}, got {walks.starts!r}")
    if not 1 <= walks.min_hops <= walks.max_hops:
        problems.append(f"gsr.walks needs 1 <= min_hops <= max_hops, got {walks.min_hops}..{walks.max_hops}")
    if walks.ratio <= 0:
        problems.append(
            f"gsr.walks.count={walks.count} needs gsr.walks.ratio > 0 (walk examples per "
            f"retrieval question and epoch), got {walks.ratio}"
        )
    return problems


EVAL_MODES = ("unconstrained", "constrained")


def option_problems(g: Mapping[str, Any], walks: WalkSettings) -> list[str]:
    """Mistakes in a GSR run's options (``gsr.eval_modes``, ``gsr.index.kg_share``, ``gsr.walks``),
    to report before any data work."""
    problems = [
        f"gsr.eval_modes entries must be unconstrained | constrained, got {mode!r}"
        for mode in g.get("eval_modes", ["unconstrained"])
        if mode not in EVAL_MODES
    ]
    problems += walk_problems(walks)
    share = (g.get("index") or {}).get("kg_share")
    if share is not None and (not isinstance(share, (int, float)) or not 0 <= float(share) <= 1):
        problems.append(f"gsr.index.kg_share must be a share in [0, 1] or null, got {share!r}")
    elif share is not None and g.get("schedule") == "retrieval":
        problems.append("gsr.index.kg_share weights indexing examples, but gsr.schedule=retrieval has none")
    return problems


def random_walks(
    src: GSRSource, g: Any, index, splits: tuple, walks: WalkSettings, default_starts: str, exclude=()
) -> list:
    """``gsr.walks``: composed multi-hop examples from random walks over ``splits``' graphs
    (``starts: auto`` = ``default_starts``: topic entities for a RoG dataset, named entities for a
    shared KG), seeded by the run's seed, skipping ``gsr.filter.drop_prefixes`` relations (``g``: the
    run's ``gsr`` recipe)."""
    if walks.count <= 0:
        return []
    sampled = sample_walks(
        index,
        splits,
        count=walks.count,
        min_hops=walks.min_hops,
        max_hops=walks.max_hops,
        starts=default_starts if walks.starts == "auto" else walks.starts,
        exclude=exclude,
        drop_prefixes=tuple(g.filter.drop_prefixes or ()),
        seed=src.seed,
    )
    return walk_examples(sampled, seed=src.seed)


def walk_counts(walks: list) -> dict:
    """The data summary's walk figures (none without walks)."""
    if not walks:
        return {}

    return walk_summary(walks)


# --------------------------------------------------------------------------- graphs of chain files


def graph_splits(graphs: str, configured: Sequence[str] | None) -> tuple[str, ...]:
    """``data.graph_splits`` (``configured``), or (null) every split file the ``graphs`` folder holds."""
    if configured:
        return tuple(configured)

    present = []
    for split in DEFAULT_SPLITS:
        try:
            find_split_file(graphs, split)
            present.append(split)
        except FileNotFoundError:
            continue
    if not present:
        raise GSRDataError(f"data.graphs={graphs}: no split file ({', '.join(DEFAULT_SPLITS)}) there")
    return tuple(present)


def questions_with_graphs(src: GSRSource, eval_split: str, evaluation: list, gidx) -> tuple[list, int]:
    """The evaluation questions to score and how many of them have no graph in ``gidx``.
    ``data.questions_without_graph``: ``error`` (the default: such a question could only score 0 in
    constrained decoding and answer coverage), ``skip`` (left out) or ``keep`` (scored, as misses
    where a graph is needed)."""
    policy = src.questions_without_graph or "error"
    if policy not in ("error", "skip", "keep"):
        raise GSRDataError(f"data.questions_without_graph={policy}: use error, skip or keep")
    known = {qid for graphs in gidx.splits.values() for qid in graphs.ids}
    kept = [q for q in evaluation if q.id in known]
    lost = len(evaluation) - len(kept)
    if lost and policy == "error":
        examples = ", ".join(q.id for q in evaluation if q.id not in known)[:200]
        raise GSRDataError(
            f"{lost} of {len(evaluation)} evaluation questions of {src.name} [{eval_split}] have no graph "
            f"in data.graphs={src.graphs} (splits {', '.join(gidx.splits)}; e.g. {examples}): point "
            "data.graphs at the RoG-format folder holding these question ids, or set "
            "data.questions_without_graph=skip (evaluate only the questions that have one) or =keep (score them "
            "as misses wherever a graph is needed)"
        )
    if lost:
        log.warning(
            "%d of %d evaluation questions have no graph in %s: %s (data.questions_without_graph=%s)",
            lost,
            len(evaluation),
            src.graphs,
            "left out" if policy == "skip" else "misses in constrained decoding and coverage",
            policy,
        )
    if not kept:
        raise GSRDataError(f"no evaluation question of {src.name} has a graph in data.graphs={src.graphs}")
    return (kept if policy == "skip" else evaluation), lost


def gather_graphs(index, ids: list[str]):
    """One SplitGraphs (split ``eval`` of a new KGIndex) with the graph of every id, in order (an
    empty graph when no split has it); also which ids have a graph and how many do not."""
    where: dict[str, tuple[str, int]] = {}
    for split, graphs in index.splits.items():
        for i, qid in enumerate(graphs.ids):
            where.setdefault(qid, (split, i))
    parts, missing = [], 0
    for qid in ids:
        if qid in where:
            s, i = where[qid]
            parts.append(index[s].graph(i))
        else:
            missing += 1
            z = torch.zeros(0, dtype=torch.long)
            parts.append(
                QuestionGraph(
                    qid,
                    "",
                    [],
                    z,
                    torch.zeros(2, 0, dtype=torch.long),
                    z,
                    torch.zeros(0, dtype=torch.bool),
                    torch.zeros(0, dtype=torch.bool),
                )
            )
    merged = _concat(parts)
    has_graph = [qid in where for qid in ids]
    return KGIndex(index.entities, index.relations, {"eval": merged}, {}), has_graph, missing


# --------------------------------------------------------------------------- the two layouts


@dataclass
class _EvalGraphs:
    """What the graphs folder of a chain-file layout gives (nothing without ``data.graphs``)."""

    evaluation: list
    has_graph: list[bool]
    graph_index: Any = None
    kg_relations: list[str] = field(default_factory=list)
    subjects: dict[str, list[str]] = field(default_factory=dict)
    walks: list = field(default_factory=list)
    without_graph: int = 0


def prepare_paths_data(
    src: GSRSource, g: Any, load_graphs: Callable[[Any, tuple[str, ...]], Any], walks: WalkSettings
) -> GSRData:
    """Chain-supervision rows (webqsp_paths) + graphs of a RoG dataset sharing the ids (``g``: the
    run's ``gsr`` recipe); ``load_graphs(folder, splits)`` opens the KG index of ``data.graphs``."""
    rows = {s: load_path_rows(src.dir, s) for s in src.splits}
    variant = g.variant
    training = not g.eval_only
    llm = llm_chains(g.llm_chains)
    # the rows are read anyway: eval-only runs of models that did not record their training
    # chains' relations take the seen / unseen groups from this training split
    train = questions_from_paths(rows["train"], variant, llm, asdict(g.filter)) if "train" in rows else []
    validation = questions_from_paths(rows.get("validation", []), "raw") if training else []
    gpt = {
        r.id: [*(r.llm_paths or []), *((llm or {}).get(r.id) or [])]  # GPT chains count for the holdout too
        for s in ("train", "validation")
        for r in rows.get(s, [])
    }
    train, validation, holdout = apply_holdout(train, validation, asdict(g.holdout), gpt)
    evaluation = questions_from_paths(rows[g.eval_split], "raw")
    if not src.graphs and "constrained" in g.eval_modes:
        raise GSRDataError(
            f"gsr.eval_modes has constrained, which decodes on each question's graph, but "
            f"{src.name} is chain files and data.graphs is not set: point data.graphs at the "
            "RoG-format folder holding the questions' graphs, or set gsr.eval_modes=[unconstrained]"
        )
    eg = _EvalGraphs(evaluation, [False] * len(evaluation))
    if src.graphs:
        eg = _paths_graphs(src, g, load_graphs, walks, evaluation, training)
    summary = {
        "layout": "paths",
        "eval_without_graph": eg.without_graph,
        "train_questions": len(train),
        "train_chains": sum(len(q.chains) for q in train),
        "variant": variant,
        "eval_questions": len(eg.evaluation),
        "eval_with_graph": int(sum(eg.has_graph)),
        "holdout": holdout,
        **walk_counts(eg.walks),
    }
    return GSRData(
        train,
        validation,
        eg.evaluation,
        "eval",
        eg.graph_index,
        eg.kg_relations,
        eg.subjects,
        summary,
        eg.has_graph,
        eg.walks,
    )


def _paths_graphs(
    src: GSRSource, g: Any, load_graphs, walks: WalkSettings, evaluation: list, training: bool
) -> _EvalGraphs:
    """The evaluation questions' graphs gathered from ``data.graphs``, the KG's relations, indexing
    subjects and (training) walks over it, none starting at an evaluation question's topic."""
    splits = graph_splits(str(src.graphs), src.graph_splits)
    gidx = load_graphs(src.graphs, splits)
    evaluation, without_graph = questions_with_graphs(src, g.eval_split, evaluation, gidx)
    graph_index, has_graph, _ = gather_graphs(gidx, [q.id for q in evaluation])
    eval_graphs = graph_index["eval"]
    topics = {gidx.entities[int(e)] for e in eval_graphs.entity_ids[eval_graphs.topic_mask].tolist()}
    subjects = relation_subjects(
        gidx, splits, exclude=topics, per_relation=g.index.subjects_per_relation, seed=src.seed
    )
    # the KG is shared with the evaluation questions: no walk starts at their topics
    sampled = random_walks(src, g, gidx, splits, walks, "named", exclude=topics) if training else []
    return _EvalGraphs(evaluation, has_graph, graph_index, list(gidx.relations), subjects, sampled, without_graph)


def prepare_rog_data(src: GSRSource, g: Any, index, cache: Path, walks: WalkSettings) -> GSRData:
    """A RoG-format dataset (its KG ``index``, the supervision cached in ``cache``): chains from the
    KG supervision, graphs from the KG index (``g``: the run's ``gsr`` recipe)."""
    sup = {s: get_supervision(index, s, cache) for s in src.splits}
    training = not g.eval_only  # evaluation needs only the split it scores
    train: list[ChainQuestion] = []
    validation: list[ChainQuestion] = []
    subjects: dict[str, list[str]] = {}
    holdout: dict[str, Any] = {}
    sampled: list = []
    if training:
        llm = llm_chains(g.llm_chains)
        train = questions_from_kg(index, "train", sup["train"], g.variant, llm)
        validation = questions_from_kg(index, "validation", sup["validation"], "raw") if "validation" in sup else []
        train, validation, holdout = apply_holdout(train, validation, asdict(g.holdout), llm)
        subjects = relation_subjects(index, ("train",), per_relation=g.index.subjects_per_relation, seed=src.seed)
        sampled = random_walks(src, g, index, ("train",), walks, "topics")
    evaluation = questions_from_kg(index, g.eval_split, sup[g.eval_split], "raw")
    graph_index = KGIndex(index.entities, index.relations, {"eval": index[g.eval_split]}, {})
    summary = {
        "layout": "rog",
        "train_questions": len(train),
        "train_chains": sum(len(q.chains) for q in train),
        "variant": g.variant,
        "eval_questions": len(evaluation),
        "eval_with_graph": len(evaluation),
        "holdout": holdout if training else {},
        **walk_counts(sampled),
    }
    return GSRData(
        train,
        validation,
        evaluation,
        "eval",
        graph_index,
        list(index.relations),
        subjects,
        summary,
        [True] * len(evaluation),
        sampled,
    )


# --------------------------------------------------------------------------- relation vocabulary


def relation_vocab(relations: Mapping[str, Any], data: GSRData) -> list[str]:
    """The model's relations by ``relations.source`` (``gsr.relations``): ``kg``: KG relations +
    training-chain relations; ``chains``: training chains only; ``file``: a vocabulary file
    (``relations.file``, ``keep``) + training-chain relations; ``all``: the KG's, the file's and the
    training chains' relations (indexing data for every one)."""
    src = relations["source"]
    train_rels = chain_relations(data.train)
    if src == "kg":
        return merge_vocab(data.kg_relations, train_rels)
    if src == "chains":
        return merge_vocab(train_rels)
    if src in ("file", "all"):
        if not relations.get("file"):
            raise GSRDataError(
                f"gsr.relations.source={src} needs gsr.relations.file (e.g. "
                "${paths.shared_data}/freebase_relations.txt)"
            )
        listed = load_relation_file(relations["file"], relations.get("keep", "relations"))
        return merge_vocab(listed, train_rels) if src == "file" else merge_vocab(data.kg_relations, listed, train_rels)
    raise ValueError(f"gsr.relations.source must be kg | chains | file | all, got {src!r}")
