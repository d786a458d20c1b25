"""Typed recipes: the options of every runner as dataclasses, checked before any work.

Hydra refuses a misspelled ``key=value`` on the command line, but not a key added with ``+``, a
key written into an experiment file, or a section of the wrong runner. :func:`check_recipe`
walks the composed config against the runner's :class:`Recipe` (its top-level keys and one
dataclass per section, nested dataclasses for nested sections) and reports every unknown key at
once, each with the file that defines the section and the closest known name. Where the code
already reads a section through a dataclass (``DecodeConfig``, ``LLMConfig``, ``KGEConfig``,
``SimGRAGConfig``, ``SAFEConfig``) that class is the recipe. Sections that are open by design (a
model's ``config`` passed to transformers, ``robustness.retrievers`` keyed by any registered
retriever) are typed ``dict``. The SubgraphRAG model is checked by its own
:class:`~gsr_train.models.subgraphrag.scorer.ScorerConfig` in the runner's preflight.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gsr_train.config import at_least, between, one_of
from gsr_train.data.errors import UserError
from gsr_train.llm.client import LLMConfig
from gsr_train.models.edge_scorer import EdgeLoss
from gsr_train.models.gsr.decoding import DecodeConfig
from gsr_train.models.gsr.options import GSROptim
from gsr_train.models.subgraphrag.options import SubgraphRAGModel
from gsr_train.retrievers.classic import ClassicRun
from gsr_train.retrievers.safe import SAFEConfig
from gsr_train.retrievers.simgrag import SimGRAGConfig
from gsr_train.robustness.kge import KGEConfig

# what run folders saved before the runners had names
DOTTED = {
    "gsr_train.runs.subgraphrag.run": "subgraphrag",
    "gsr_train.runs.gsr.run": "gsr",
    "gsr_train.runs.reader.run": "reader",
    "gsr_train.runs.retrieve.run": "retrieve",
    "gsr_train.runs.cosine.run": "cosine",
    "gsr_train.runs.classic.run": "classic",
    "gsr_train.runs.patterns.run_simgrag": "simgrag",
    "gsr_train.runs.patterns.run_safe": "safe",
    "gsr_train.runs.robustness.run": "robustness",
}


def runner_name(value: Any) -> str:
    """The built-in name of ``value`` (a name or a dotted path saved by an older run), else ``value``."""
    text = str(value)
    return DOTTED.get(text, text)


# keys every experiment has (conf/config.yaml and its groups; conf/eval.yaml adds ckpt_path, split)
COMMON = (
    "runner",
    "experiment_name",
    "seed",
    "resume",
    "checkpoint_every_n_steps",
    "batch_scope",
    "float32_matmul_precision",
    "eval_ks",
    "paths",
    "hydra",
    "data",
    "encoder",
    "trainer",
    "logger",
    "callbacks",
    "ckpt_path",
    "split",
)


@dataclass
class TopLevel:
    """The types and ranges of the top-level keys (those an experiment has are checked)."""

    seed: int = 42
    resume: str | None = None
    checkpoint_every_n_steps: int | None = at_least(1, 500)
    batch_scope: str = one_of("global", "global", "per_device")
    float32_matmul_precision: str | None = one_of(None, None, "highest", "high", "medium")
    eval_ks: list[int] = field(default_factory=lambda: [10, 20, 50, 100, 200])
    split: str = "test"
    top_k: int = at_least(1, 100)
    train_split: str | None = "train"
    val_split: str | None = "validation"
    eval_only: str | None = None


@dataclass
class DataOptions:
    """The ``data`` keys whose type and range are the same in every dataset file (the section is
    otherwise open: each dataset file has keys of its own)."""

    # threads / processes of the index build, the embeddings and the supervision; null: the cores
    # available (gsr_train.parallel). Not in any cache key: the outputs are the same for any count
    workers: int | None = at_least(1, None)


DATA_FILE = "conf/data/ (data=...)"


@dataclass
class ReaderTopLevel(TopLevel):
    top_k: int = at_least(0, 100)  # evidence lines per prompt; 0: closed book


# ------------------------------------------------------------------ SubgraphRAG
@dataclass
class SubgraphRAGRun:
    train_split: str | None = "train"
    val_split: str | None = "validation"
    eval_split: str = "test"
    eval_graphs_per_batch: int = at_least(1, 128)
    threads: int | None = at_least(1, 1)
    eval_only: str | None = None
    compare_cosine: bool = True
    device: str | None = None
    serving: str = one_of("auto", "auto", "compiled", "torch")
    serving_workers: int | None = at_least(1, None)


# ------------------------------------------------------------------ GSR
@dataclass
class GSRFilter:
    drop_repeats: bool = True
    drop_prefixes: list = field(
        default_factory=lambda: ["common.", "freebase.", "type.", "kg.", "user.", "dataworld.", "base.type_ontology."]
    )


@dataclass
class GSRRelations:
    source: str = "kg"
    file: str | None = None
    keep: str = "relations"


@dataclass
class GSRIndexData:
    per_relation: int = 10
    subjects_per_relation: int = 10
    relations: str = "vocab"
    templates: str | None = None
    fallback_subject: bool = True
    kg_share: float | None = None


@dataclass
class GSRHoldout:
    fraction: float = between(0, 1, 0.0)
    seed: int = 0


@dataclass
class GSRWalks:
    count: int = at_least(0, 0)
    ratio: float = at_least(0, 0.25)
    min_hops: int = at_least(1, 2)
    max_hops: int = at_least(1, 4)
    starts: str = "auto"
    prefix: str = "retrieval"


@dataclass
class GSRRun:
    variant: str = "raw"
    llm_chains: str | None = None
    filter: GSRFilter = field(default_factory=GSRFilter)
    relations: GSRRelations = field(default_factory=GSRRelations)
    schedule: str = "joint"
    index_epochs: int = at_least(0, 0)
    index_ratio: float = 1.0
    index: GSRIndexData = field(default_factory=GSRIndexData)
    holdout: GSRHoldout = field(default_factory=GSRHoldout)
    walks: GSRWalks = field(default_factory=GSRWalks)
    max_targets: int = at_least(1, 8)
    loss_weighting: str = "question"
    eval_split: str = "test"
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    val_decode: DecodeConfig = field(default_factory=lambda: DecodeConfig(beams=5, batch_size=64))
    eval_modes: list = field(default_factory=lambda: ["unconstrained", "constrained"])
    match_ns: list = field(default_factory=lambda: [1, 3, 5, 10])
    monitor: str = "val/match@1"
    max_val_questions: int | None = at_least(1, None)
    max_eval_questions: int | None = at_least(1, None)
    max_paths: int = at_least(1, 64)
    eval_only: str | None = None
    threads: int | None = at_least(1, 1)


@dataclass
class GSRModelT5:
    name: str = "gsr"
    family: str = "t5"
    pretrained: str | None = None
    tokenizer: str | None = None
    config: dict = field(default_factory=dict)  # transformers.T5Config arguments
    relation_init: str = "random"
    relation_head: str = "token"
    relation_residual: bool = True
    relation_residual_dropout: float = between(0, 1, 0.0)
    max_source_length: int = at_least(1, 64)
    epochs: int = at_least(1, 10)
    batch_size: int = at_least(1, 32)
    optim: GSROptim = field(default_factory=GSROptim)
    revision: str | None = None


@dataclass
class MiniLMDecoder:
    layers: int = 2
    heads: int = 6
    intermediate_size: int = 1536
    dropout: float = 0.1
    max_positions: int = 16


@dataclass
class GSRModelMiniLM:
    name: str = "gsr_minilm"
    family: str = "minilm"
    pretrained: str | None = None
    decoder: MiniLMDecoder = field(default_factory=MiniLMDecoder)
    relation_init: str = "words"
    relation_head: str = "token"
    relation_residual: bool = True
    relation_residual_dropout: float = between(0, 1, 0.0)
    freeze_encoder_embeddings: bool = True
    freeze_encoder_layers: int = 0
    max_source_length: int = at_least(1, 48)
    epochs: int = at_least(1, 6)
    batch_size: int = at_least(1, 64)
    optim: GSROptim = field(default_factory=GSROptim)


# ------------------------------------------------------------------ readers
@dataclass
class EvidenceSource:
    """One source of merged evidence (``qa.retrieval.sources``): the keys of ``qa.retrieval`` plus
    its label, how many lines it offers and its share of the prompt in tokens."""

    label: str | None = None
    checkpoint: str | None = None
    results: dict = field(default_factory=dict)  # split -> results file
    retriever: str | None = None
    options: dict | None = None
    k: int = at_least(1, 100)
    top_k: int | None = at_least(1, None)  # lines from this source (null: the run's top_k)
    share: int | None = at_least(1, None)  # most prompt tokens from this source (null: no own bound)


@dataclass
class QARetrieval:
    checkpoint: str | None = None
    k: int = at_least(1, 100)
    results: dict = field(default_factory=dict)  # split -> results file
    retriever: str | None = None
    options: dict | None = None  # the registered retriever's own options
    sources: list[EvidenceSource] | None = None  # several sources, merged (instead of the keys above)


@dataclass
class QATrain:
    enabled: bool = True
    epochs: int = at_least(0, 3)
    max_steps: int | None = None
    batch_size: int = at_least(1, 4)
    accumulate: int = at_least(1, 1)
    lr: float = at_least(0, 2e-4, above=True)
    weight_decay: float = 0.0
    warmup_ratio: float = between(0, 1, 0.03)
    gradient_clip_val: float = 1.0
    max_length: int = at_least(1, 4096)
    no_evidence_fraction: float = between(0, 1, 0.0)
    require_answers: bool = True
    log_every: int = 10


@dataclass
class QAVariants:
    base: list = field(default_factory=lambda: ["none", "retrieved"])
    finetuned: list = field(default_factory=lambda: ["retrieved", "none"])


@dataclass
class QAEval:
    batch_size: int = at_least(1, 16)
    max_new_tokens: int = at_least(1, 64)
    variants: QAVariants = field(default_factory=QAVariants)


@dataclass
class QARun:
    backend: str = "local"
    format: str = "subgraphrag"
    max_prompt_tokens: int = at_least(1, 4000)
    icl: bool = True
    train_split: str | None = "train"
    eval_split: str = "test"
    limit: dict = field(default_factory=dict)  # split -> first N questions
    threads: int | None = at_least(1, 1)
    eval_only: str | None = None
    merge: bool = False
    retrieval: QARetrieval = field(default_factory=QARetrieval)
    train: QATrain = field(default_factory=QATrain)
    eval: QAEval = field(default_factory=QAEval)


@dataclass
class LoRA:
    r: int = at_least(1, 16)
    alpha: int = at_least(1, 16)
    dropout: float = between(0, 1, 0.05)
    target_modules: list = field(default_factory=list)


@dataclass
class ReaderModel:
    name: str = "smollm2"
    model: str = "smollm2"
    precision: str = "bf16"
    compute_dtype: str = "bf16"
    adapter: str = "lora"
    lora: LoRA = field(default_factory=LoRA)
    gradient_checkpointing: bool = True
    device_map: str | None = None


# ------------------------------------------------------------------ classic / patterns / robustness
@dataclass
class PatternSource:
    """The union of the three sources' options (conf/patterns/{gold,gsr,llm}.yaml)."""

    source: str = "gold"
    chains: str = "filtered"
    max_chains: int = 3
    results: str | None = None
    skip_unknown: bool = True
    kind: str | None = None
    system: str | None = None
    user: str | None = None
    limit: int | None = None


@dataclass
class RobustnessRun:
    methods: list = field(default_factory=lambda: ["swap", "replace", "rewire", "delete"])
    levels: list = field(default_factory=lambda: [0.2, 0.4, 0.6, 0.8, 1.0])
    seed: int = 0
    protect_gold: bool = False
    max_questions: int | None = at_least(1, None)
    threads: int | None = at_least(1, 1)
    kge: KGEConfig = field(default_factory=KGEConfig)
    retrievers: dict = field(default_factory=dict)  # name -> options of any registered retriever


@dataclass
class GEvalRun:
    """G-Eval: the criteria rated and how a rating is read (gsr_train.openended.stages.geval)."""

    criteria: list = field(
        default_factory=lambda: ["context_relevance", "comprehensiveness", "correctness", "empowerment"]
    )
    method: str = one_of("auto", "auto", "logprobs", "samples")
    samples: int = at_least(1, 5)
    temperature: float = at_least(0, 1.0)
    max_tokens: int = at_least(1, 3)


@dataclass
class JudgeCalibration:
    per_question: int = at_least(1, 1)  # true facts per graph (each with its two perturbed copies)
    max_facts: int | None = at_least(1, 150)
    seed: int = 0


@dataclass
class PerturbGrid:
    """The OKGQA-P grid of ``+experiment=okgqa_perturbed`` (gsr_train.robustness.perturb)."""

    methods: list = field(default_factory=lambda: ["swap", "replace", "rewire", "delete"])
    levels: list = field(default_factory=lambda: [0.5, 1.0])
    seed: int = 0
    kge: KGEConfig = field(default_factory=KGEConfig)


@dataclass
class OpenEndedRun:
    """OKGQA's open-ended evaluation (conf/experiment/okgqa_defaults.yaml restates these defaults)."""

    questions: str = "embedded"  # embedded | a questions .jsonl | OKGQA's CSV
    max_questions: int | None = at_least(1, 50)
    skip_unknown: bool = False  # questions about graphs the split lacks: counted and skipped
    forms: list = field(default_factory=lambda: ["none", "triplets"])
    results: dict = field(default_factory=dict)  # label -> results_<split>.jsonl of any retriever
    knowledge: str = "graph"  # graph | evidence | a text file
    answer_tokens: int = at_least(1, 160)
    repetition_penalty: float | None = at_least(0, 1.3, above=True)  # answers, on the project's own server
    facts: str = one_of("llm", "llm", "sentences")
    fact_tokens: int = at_least(1, 96)
    max_facts: int = at_least(1, 10)
    verifiers: list = field(default_factory=lambda: ["encoder", "llm"])
    encoder_candidates: int = at_least(1, 32)
    llm_lines: int = at_least(1, 10)
    gamma: int = at_least(0, 10)
    threads: int | None = at_least(1, 2)
    geval: GEvalRun = field(default_factory=GEvalRun)
    calibration: JudgeCalibration = field(default_factory=JudgeCalibration)
    perturb: PerturbGrid = field(default_factory=PerturbGrid)


@dataclass
class EdgeTrain:
    """How a trainable retriever (an EdgeScorerModule) trains."""

    epochs: int = at_least(1, 10)
    graphs_per_batch: int = at_least(1, 16)
    eval_graphs_per_batch: int = at_least(1, 64)
    patience: int | None = at_least(0, 4)
    val_k: int = at_least(1, 20)
    loss: EdgeLoss = field(default_factory=EdgeLoss)


@dataclass
class RetrieverSpec:
    """``+experiment=retrieve``'s retriever: a registered ``name`` or an import path (``_target_``),
    and the options its factory takes (each retriever checks its own)."""

    name: str = "cosine"
    _target_: str | None = None
    options: dict = field(default_factory=dict)
    train: EdgeTrain = field(default_factory=lambda: EdgeTrain())


@dataclass
class GSRRetrieverOptions(GSRRun):
    """``retriever=gsr`` on ``+experiment=retrieve``: a trained GSR to score (``model``: a saved model
    folder or .ckpt; ``results``: a GSR results file), else the recipe of the one it trains, the GSR
    experiments' ``gsr`` section (the same keys and defaults; ``decode.top_n``: the chains kept)."""

    model: str | None = None
    results: str | None = None


@dataclass
class GSRRetrieverSpec:
    """:class:`RetrieverSpec` of ``retriever=gsr``, its options typed."""

    name: str = "gsr"
    _target_: str | None = None
    options: GSRRetrieverOptions = field(default_factory=GSRRetrieverOptions)
    train: EdgeTrain = field(default_factory=lambda: EdgeTrain())


def _retriever_spec(cfg: Mapping[str, Any]) -> type:
    return GSRRetrieverSpec if cfg.get("name") == "gsr" and not cfg.get("_target_") else RetrieverSpec


# ------------------------------------------------------------------ recipes
@dataclass(frozen=True)
class Recipe:
    """A runner's options: extra top-level keys and one dataclass per section, with the file that
    defines them (named in errors)."""

    file: str
    top_level: tuple[str, ...] = ()
    sections: Mapping[str, Any] = field(default_factory=dict)
    top: type = field(default_factory=lambda: TopLevel)  # types and ranges of the top-level keys


def _gsr_model(cfg: Mapping[str, Any]) -> type:
    return GSRModelMiniLM if cfg.get("family") == "minilm" else GSRModelT5


RECIPES: dict[str, Recipe] = {
    "subgraphrag": Recipe(
        "conf/experiment/subgraphrag_defaults.yaml",
        ("top_k",),
        {"subgraphrag": SubgraphRAGRun, "model": SubgraphRAGModel},
    ),
    "gsr": Recipe("conf/experiment/gsr_defaults.yaml", ("top_k",), {"gsr": GSRRun, "model": _gsr_model}),
    "reader": Recipe(
        "conf/experiment/reader_defaults.yaml",
        ("top_k",),
        {"qa": QARun, "reader": ReaderModel, "llm": LLMConfig},
        ReaderTopLevel,
    ),
    "cosine": Recipe("conf/experiment/cosine_baseline.yaml", ("split", "top_k", "cosine_mode")),
    "retrieve": Recipe(
        "conf/experiment/retrieve.yaml",
        ("split", "top_k", "train_split", "val_split", "eval_only"),
        {"retriever": _retriever_spec, "model": _gsr_model},  # model: retriever=gsr's (conf/retriever/gsr.yaml)
    ),
    "classic": Recipe("conf/experiment/classic_defaults.yaml", ("split", "top_k"), {"classic": ClassicRun}),
    "simgrag": Recipe(
        "conf/experiment/simgrag.yaml",
        ("split",),
        {"simgrag": SimGRAGConfig, "patterns": PatternSource, "llm": LLMConfig},
    ),
    "safe": Recipe(
        "conf/experiment/safe.yaml", ("split",), {"safe": SAFEConfig, "patterns": PatternSource, "llm": LLMConfig}
    ),
    "robustness": Recipe(
        "conf/robustness/default.yaml", ("split", "top_k"), {"robustness": RobustnessRun, "classic": ClassicRun}
    ),
}
_OPEN_ENDED = Recipe(
    "conf/experiment/okgqa_defaults.yaml",
    ("split", "top_k"),
    {"open_ended": OpenEndedRun, "classic": ClassicRun, "llm": LLMConfig},
)
RECIPES.update({"open_ended": _OPEN_ENDED, "judge_calibration": _OPEN_ENDED, "open_ended_perturbed": _OPEN_ENDED})
GROUPS = {"model": "name", "reader": "name", "patterns": "source"}  # group folder -> key naming its file


def _section_file(section: str, node: Any, recipe: Recipe) -> str:
    """The file that defines ``section``: the chosen group file when the section is a config group."""
    from gsr_train.config import project_root

    if section in GROUPS and isinstance(node, Mapping) and node.get(GROUPS[section]):
        path = f"conf/{section}/{node[GROUPS[section]]}.yaml"
        if (project_root() / path).exists():
            return path
    if section == "llm":
        return "conf/llm/ (llm=...)"
    if section == "classic":
        return "conf/experiment/classic_defaults.yaml"
    if section == "open_ended":
        return "conf/experiment/okgqa_defaults.yaml"
    return recipe.file


def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def _unknown(node: Any, cls: type, prefix: str) -> list[tuple[str, str, list[str]]]:
    """(dotted key, owning dataclass, known names at that level) for every key ``cls`` lacks."""
    if not isinstance(node, Mapping):
        return []
    known = _fields(cls)
    out = []
    for key, value in node.items():
        if key not in known:
            out.append((f"{prefix}.{key}", cls.__name__, sorted(known)))
            continue
        typ = known[key]
        if isinstance(typ, type) and dataclasses.is_dataclass(typ) and isinstance(value, Mapping):  # a class hint
            out += _unknown(value, typ, f"{prefix}.{key}")
        elif (item := _item_class(typ)) is not None and isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                out += _unknown(v, item, f"{prefix}.{key}[{i}]")
    return out


def _item_class(hint: Any) -> type | None:
    """The dataclass of a ``list[SomeDataclass]`` hint (optional or not), else None."""
    for h in (hint, *typing.get_args(hint)):
        if (typing.get_origin(h) or h) is list:
            items = typing.get_args(h)[:1]
            if items and isinstance(items[0], type) and dataclasses.is_dataclass(items[0]):
                return items[0]
    return None


def _expected(hint: Any) -> str:
    """How a type hint reads in an error: ``an integer``, ``a number or null``, ..."""
    if hint is Any:
        return "anything"
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_expected(a) for a in args)
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(map(str, args))
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}
    if hint in names:
        return names[hint]
    if (typing.get_origin(hint) or hint) in (list, tuple):
        items = typing.get_args(hint)[:1]
        return f"a list of {_expected(items[0]).removeprefix('an ').removeprefix('a ')}s" if items else "a list"
    return "a mapping"


def _fits(value: Any, hint: Any) -> bool:
    """Does ``value`` (a plain YAML value) have the type ``hint`` asks for?"""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if (origin or hint) in (list, tuple):
        items = typing.get_args(hint)[:1]
        return isinstance(value, (list, tuple)) and all(_fits(v, items[0]) for v in value if items)
    return isinstance(value, Mapping)  # dict and dataclass sections


def _out_of_range(value: Any, meta: Mapping[str, Any]) -> str | None:
    """What the field's range says ``value`` should be, when it is not."""
    if "choices" in meta and value not in meta["choices"]:
        return "one of " + ", ".join("null" if c is None else str(c) for c in meta["choices"])
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    if "gt" in meta and not value > meta["gt"]:
        return f"a number > {meta['gt']}"
    low, high = meta.get("min"), meta.get("max")
    if (low is not None and value < low) or (high is not None and value > high):
        return f"in [{low}, {high}]" if high is not None else f">= {low}"
    return None


def _unset(value: Any) -> bool:
    """A value that is resolved later (an interpolation) or filled in by the user (``???``)."""
    return isinstance(value, str) and ("${" in value or value == "???")


def _invalid(node: Any, cls: type, prefix: str) -> list[str]:
    """``key=value: expected ...`` for every value of ``node`` whose type or range ``cls`` refuses."""
    if not isinstance(node, Mapping):
        return []
    hints, out = _fields(cls), []
    meta = {f.name: f.metadata for f in dataclasses.fields(cls)}
    for key, value in node.items():
        if key not in hints or _unset(value):
            continue
        hint, where = hints[key], f"{prefix}.{key}" if prefix else str(key)
        if not _fits(value, hint):
            shown = "null" if value is None else value
            out.append(f"{where}={shown}: expected {_expected(hint)}")
        elif value is not None and (why := _out_of_range(value, meta[key])):
            out.append(f"{where}={value}: expected {why}")
        elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
            out += _invalid(value, hint, where)
        elif (item := _item_class(hint)) is not None and isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                out += (
                    _invalid(v, item, f"{where}[{i}]")
                    if isinstance(v, Mapping)
                    else [f"{where}[{i}]={v}: expected a mapping"]
                )
    return out


def _hint(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], known, n=1)
    return f"; did you mean {key.rsplit('.', 1)[0]}.{close[0]}?" if close else f" (known: {', '.join(known)})"


# options that took the one name of their concept (the README's glossary), by runner
RENAMED = {
    "subgraphrag": {"subgraphrag.top_k": "top_k"},
    "gsr": {"gsr.decode.top_n": "top_k"},
    "reader": {"qa.k": "top_k"},
    "robustness": {"robustness.report_k": "top_k"},
}


def _renamed(cfg: Mapping[str, Any], runner: str) -> list[str]:
    """An option given by its old name: one line naming the new one."""
    out = []
    for old, new in RENAMED.get(runner, {}).items():
        section, _, key = old.rpartition(".")
        node: Any = cfg
        for part in section.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and key in node:
            out.append(f"{old}: renamed to {new} (one name for how many a run keeps, in every method and in eval.py)")
    return out


def recipe_errors(cfg: Mapping[str, Any]) -> list[str]:
    """Every unknown key of the composed config ``cfg`` (a plain mapping) under its runner's recipe."""
    runner = runner_name(cfg.get("runner"))
    recipe = RECIPES.get(runner)
    if recipe is None:  # a runner of the user's own: its options are its business
        return []
    errors = _renamed(cfg, runner)
    allowed = set(COMMON) | set(recipe.top_level) | set(recipe.sections)
    for key in cfg:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            errors.append(
                f"{key}: not an option of runner {runner} ({recipe.file})"
                + (f"; did you mean {close[0]}?" if close else "")
            )
    for section, cls in recipe.sections.items():
        node = cfg.get(section)
        if node is None:
            continue
        if not dataclasses.is_dataclass(cls):
            cls = cls(node)
        where = _section_file(section, node, recipe)
        for key, owner, known in _unknown(node, cls, section):
            if key in RENAMED.get(runner, {}):
                continue  # named by _renamed
            errors.append(f"{key}: not a {owner} option ({where}){_hint(key, known)}")
    return errors


def value_errors(cfg: Mapping[str, Any]) -> list[str]:
    """Every value of the composed config whose type or range its recipe refuses, with its file."""
    recipe = RECIPES.get(runner_name(cfg.get("runner")))
    own = set(recipe.top_level) if recipe else set()
    errors = [
        f"{e} ({recipe.file if recipe and e.split('=', 1)[0] in own else 'conf/config.yaml'})"
        for e in _invalid(cfg, recipe.top if recipe else TopLevel, "")
    ]
    errors += [f"{e} ({DATA_FILE})" for e in _invalid(cfg.get("data"), DataOptions, "data")]
    if recipe is None:
        return errors
    for section, cls in recipe.sections.items():
        node = cfg.get(section)
        if isinstance(node, Mapping):
            schema: type = cls if isinstance(cls, type) else cls(node)
            where = _section_file(section, node, recipe)
            errors += [f"{e} ({where})" for e in _invalid(node, schema, section)]
    return errors


class RecipeError(UserError, ValueError):
    """Options the runner does not have (one of the user's mistakes: reported without a traceback)."""


def check_recipe(cfg: Any) -> None:
    """Raise one :class:`RecipeError` listing every unknown key, else every value of the wrong type
    or out of range (a single one is one line: key, value, what it should be, the file)."""
    from omegaconf import DictConfig

    from gsr_train.config import as_dict

    plain = as_dict(cfg, resolve=False) if isinstance(cfg, DictConfig) else dict(cfg)
    plain.pop("hydra", None)
    errors = recipe_errors(plain)
    if errors:
        raise RecipeError("unknown options:\n  " + "\n  ".join(errors))
    invalid = value_errors(plain)
    if len(invalid) == 1:
        raise RecipeError(invalid[0])
    if invalid:
        raise RecipeError("invalid options:\n  " + "\n  ".join(invalid))
