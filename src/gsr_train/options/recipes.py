"""Typed recipes: every runner's options as dataclasses, each option with its default, a one-line
description and its range (`gsr_train.config.option`).

A `Recipe` names a runner's top-level keys (a dataclass of their types) and one dataclass
per section of the composed config (nested dataclasses for nested sections). Where the code
already reads a section through a dataclass of a lower layer (``DecodeConfig``, ``LLMConfig``,
``KGEConfig``, ``SimGRAGConfig``, ``SAFEConfig``, ``ClassicRun``, ``SubgraphRAGModel``, ``QARun``) that
class is the recipe; those classes live in torch-free option modules of their floors
(``models/gsr/options.py``, ``retrievers/options.py``, ...), so that checking options, ``--help`` and
``gsr-train options`` import no torch and answer in well under a second. Sections open by design (a
model's ``config`` passed to transformers, ``robustness.retrievers`` keyed by any registered retriever)
are typed ``dict``.
`gsr_train.options.check` checks a config against them; `gsr_train.options.describe`
prints them and writes the ``*_defaults.yaml`` files the experiments start from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from gsr_train.config import option
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.sparql_options import SparqlOptions
from gsr_train.llm.client import LLMConfig
from gsr_train.models.edge_options import EdgeLoss
from gsr_train.models.gsr.options import DecodeConfig, GSROptim
from gsr_train.models.subgraphrag.options import SubgraphRAGModel
from gsr_train.readers.options import QARun, ReaderModel
from gsr_train.retrievers.options import ClassicRun, SAFEConfig, SimGRAGConfig
from gsr_train.robustness.options import KGEConfig

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


# ------------------------------------------------------------------ top-level keys
@dataclass
class TopLevel:
    """The top-level keys of conf/config.yaml and the experiments (those a config has are checked)."""

    seed: int = option(42, "seed of everything random (data order, initialisation, sampling)")
    resume: str | None = option(
        None, "null: a fresh run | auto: continue from <run folder>/checkpoints/last.ckpt | a .ckpt path"
    )
    checkpoint_every_n_steps: int | None = option(
        500, "mid-epoch checkpoints/last.ckpt every N optimiser steps (null: at epoch ends only)", ge=1
    )
    batch_scope: Literal["global", "per_device"] = option(
        "global", "global: a recipe's batch is split over the DDP processes | per_device: each takes all of it"
    )
    float32_matmul_precision: Literal["highest", "high", "medium"] | None = option(
        None, "float32 matmuls (torch.set_float32_matmul_precision); null: high on CUDA, highest on the CPU"
    )
    eval_ks: list[int] = option(
        [10, 20, 50, 100, 200], "the Ks of the retrieval table every retriever run ends with", min_length=1
    )
    split: str = option("test", "the split scored")
    top_k: int = option(100, "how many the run keeps per question (the row's K; eval.py top_k=...)", ge=1)
    train_split: str | None = option("train", "the split trained on")
    val_split: str | None = option("validation", "the split that picks the best checkpoint (null: the last epoch)")
    eval_only: str | None = option(None, "a trained checkpoint to score instead of training (what eval.py sets)")


@dataclass
class SubgraphRAGTop(TopLevel):
    top_k: int = option(500, "triples per question in results_<split>.jsonl (the row's K; eval.py top_k=...)", ge=1)


@dataclass
class GSRTop(TopLevel):
    top_k: int = option(3, "chains kept per question: decoded beams executed (the row's K, match@top_k)", ge=1)


@dataclass
class ReaderTop(TopLevel):
    top_k: int = option(100, "evidence lines (triples / paths) per prompt, best first; 0: closed book", ge=0)


@dataclass
class ClassicTop(TopLevel):
    top_k: int = option(500, "triples per question in the results file (the row's K)", ge=1)


@dataclass
class CosineTop(TopLevel):
    top_k: int = option(500, "triples per question in the results file (the row's K)", ge=1)
    cosine_mode: Literal["parts", "verbalised"] = option(
        "parts", "parts: q.h + q.r + q.t | verbalised: cos(q, 'h r t'), slow (embeds every triple)"
    )


@dataclass
class RetrieveTop(TopLevel):
    top_k: int = option(100, "triples kept per question in the results file (recall also at 10 / 20 / 50 / 100)", ge=1)


@dataclass
class OpenEndedTop(TopLevel):
    top_k: int = option(30, "evidence edges per prompt", ge=1)


@dataclass
class DataOptions:
    """The ``data`` keys whose type and range are the same in every dataset file (the section is
    otherwise open: each dataset file has keys of its own)."""

    OPEN: ClassVar[bool] = True  # other keys are allowed
    workers: int | None = option(
        None, "threads / processes preparing the data (index, embeddings, supervision); null: the cores available", ge=1
    )
    kg: str | None = option(
        None,
        "a whole-KG store (gsr-train import-kg) or a SPARQL endpoint URL: rows without a graph get theirs cut from it",
    )
    extract: ExtractOptions = option(ExtractOptions(), "how a question's graph is cut from data.kg")
    link: bool = option(False, "with data.kg: a row without q_entity gets the entity its question names")
    sparql: SparqlOptions = option(SparqlOptions(), "with data.kg=URL: how the SPARQL endpoint is asked")


DATA_FILE = "conf/data/ (data=...)"


# ------------------------------------------------------------------ SubgraphRAG
@dataclass
class SubgraphRAGRun:
    train_split: str | None = option("train", "the split trained on")
    val_split: str | None = option("validation", "the split that picks the best checkpoint")
    eval_split: str = option("test", "the split retrieved and scored after training")
    eval_graphs_per_batch: int = option(128, "graphs scored at once (validation and inference)", ge=1)
    threads: int | None = option(1, "torch threads; 1 is fastest on a shared 2-core CPU (null: torch default)", ge=1)
    eval_only: str | None = option(None, "a trained .ckpt: skip training, only retrieve + evaluate")
    compare_cosine: bool = option(True, "also score the cosine baseline (q.h + q.r + q.t) in the same run")
    device: str | None = option(None, "scoring device (null: cuda when trainer=gpu and available, else cpu)")
    serving: Literal["auto", "compiled", "torch"] = option(
        "auto", "test-split scoring: auto (compiled CPU kernels when the model allows) | compiled | torch"
    )
    serving_workers: int | None = option(
        None, "threads of compiled scoring (null: all cores; the same numbers with any count)", ge=1
    )


# ------------------------------------------------------------------ GSR
@dataclass
class GSRFilter:
    drop_repeats: bool = option(True, "drop chains that repeat a relation")
    drop_prefixes: list[str] = option(
        ["common.", "freebase.", "type.", "kg.", "user.", "dataworld.", "base.type_ontology."],
        "drop chains with a relation of these schema prefixes",
    )


@dataclass
class GSRRelations:
    source: Literal["kg", "chains", "file", "all"] = option(
        "kg", "the model's relations: kg (KG relations + training chains) | chains | file | all (kg + file + chains)"
    )
    file: str | None = option(None, "a relation list, one per line (e.g. ${paths.shared_data}/freebase_relations.txt)")
    keep: Literal["relations", "all"] = option("relations", "file lines kept: relations (3+ dot parts) | all")


@dataclass
class GSRIndexData:
    per_relation: int = option(10, "pseudo questions per relation (the pool)", ge=1)
    subjects_per_relation: int = option(10, "KG subjects per relation the pseudo questions name", ge=1)
    relations: Literal["vocab", "kg", "subjects"] = option("vocab", "which relations get indexing data")
    templates: str | None = option(
        None, "LLM template / pseudo-question file (gsr_train.datamodules.gsr_data.load_index_file)"
    )
    fallback_subject: bool = option(True, "a relation without a KG subject gets 'the <type>' as subject")
    kg_share: float | None = option(
        None,
        "joint epochs: share of indexing examples from the KG's and training chains' relations (null: uniform)",
        ge=0,
        le=1,
    )


@dataclass
class GSRHoldout:
    fraction: float = option(
        0.0, "share of the training chains' relations held out (by a hash of the name)", ge=0, le=1
    )
    seed: int = option(0, "which share (the hash's salt)")


@dataclass
class GSRWalks:
    count: int = option(0, "distinct random walks in the pool, composed into questions (0: off)", ge=0)
    ratio: float = option(0.25, "walk examples per retrieval question per epoch", ge=0)
    min_hops: int = option(2, "shortest walk", ge=1)
    max_hops: int = option(4, "longest walk", ge=1)
    starts: str = option(
        "auto", "auto (RoG training graphs' topics; a shared KG's named non-evaluation entities) | topics | named"
    )
    prefix: str = option("retrieval", "task prefix of the walk examples: retrieval | index")


@dataclass
class GSRRun:
    variant: Literal["raw", "filtered", "llm"] = option("raw", "retrieval training chains: raw | filtered | llm")
    llm_chains: str | None = option(None, "JSONL with llm_paths / gpt_paths per id (overrides the rows' gpt_paths)")
    filter: GSRFilter = option(GSRFilter(), "variant=filtered on chain files without graphs")
    relations: GSRRelations = option(GSRRelations(), "the relation vocabulary of the model")
    schedule: Literal["joint", "retrieval", "index_then_retrieval", "index_then_joint"] = option(
        "joint", "what each epoch trains: indexing and retrieval examples together, or one after the other"
    )
    index_epochs: int = option(0, "indexing-only epochs of the index_then_* schedules", ge=0)
    index_ratio: float = option(1.0, "joint: indexing examples per retrieval question per epoch", ge=0)
    index: GSRIndexData = option(GSRIndexData(), "the indexing data: pseudo questions per relation")
    holdout: GSRHoldout = option(GSRHoldout(), "leave relations out: transfer to relations no training chain uses")
    walks: GSRWalks = option(GSRWalks(), "multi-hop signal without labels: random walks as composed questions")
    max_targets: int = option(8, "chains per training question and epoch (a fresh random subset when more)", ge=1)
    loss_weighting: Literal["question", "target"] = option(
        "question", "question: every question weighs the same | target: every chain does"
    )
    eval_split: str = option("test", "the split decoded and scored after training")
    decode: DecodeConfig = option(DecodeConfig(), "beam search of the scored split (its chains kept: top_k)")
    val_decode: DecodeConfig = option(DecodeConfig(beams=5, batch_size=64), "beam search of the validation split")
    eval_modes: list[Literal["unconstrained", "constrained"]] = option(
        ["unconstrained", "constrained"], "decodings scored: free, and restricted to chains the graph executes"
    )
    match_ns: list[int] = option([1, 3, 5, 10], "the Ns of match@N in the chain table")
    monitor: str = option("val/match@1", "the validation metric that picks the best checkpoint (or val/loss)")
    patience: int | None = option(
        None, "early stopping: validations without a better monitor before training stops (null: every epoch)", ge=1
    )
    max_val_questions: int | None = option(None, "validate on the first N questions only", ge=1)
    length_groups: int = option(
        8, "sources encoded per group of similar length in the loss (less padding; 0: the whole batch at once)", ge=0
    )
    pack: bool = option(
        True,
        "MiniLM: the loss encodes the batch's sources packed end to end, each attending to itself (no padding, "
        "one pass; false: length_groups)",
    )
    fused_adamw: bool = option(
        True, "AdamW's fused kernel: one pass over all parameters (false: torch's per-parameter loop on a CPU)"
    )
    deterministic_fill: bool = option(
        False,
        "with trainer.deterministic, torch also fills every new tensor with NaN (catches reads of uninitialised "
        "memory; no result changes; a few % of a CPU step)",
    )
    max_eval_questions: int | None = option(None, "smoke runs: evaluate on the first N questions only", ge=1)
    max_paths: int = option(64, "reasoning paths written per kept chain", ge=1)
    eval_only: str | None = option(None, "a saved model folder or .ckpt: skip training, only retrieve + evaluate")
    require_gpu: bool = option(
        False, "refuse to start (one line) where no CUDA device is visible: recipes sized for a GPU"
    )
    threads: int | None = option(1, "torch threads; 1 is fastest on a shared 2-core CPU (null: torch default)", ge=1)


RelationInit = Literal["random", "words"]
RelationHead = Literal["token", "open"]


@dataclass
class GSRModelT5:
    name: str = option("gsr", "the model file's name (conf/model/NAME.yaml)")
    family: str = option("t5", "the model family (the runner that trains it)")
    pretrained: str | None = option(None, "a hub name or folder of a T5 (null: randomly initialised from config)")
    tokenizer: str | None = option(None, "the base tokenizer: minilm (offline WordPiece) or a folder / hub name")
    config: dict = option({}, "transformers.T5Config arguments of a randomly initialised model")
    relation_init: RelationInit = option("random", "relation tokens start random, or from the embedding of their words")
    relation_head: RelationHead = option(
        "token",
        "token: one learned vector per relation | open: vectors from the relation's words (decodes unseen ones)",
    )
    relation_residual: bool = option(True, "open: plus a learned per-relation residual")
    relation_residual_dropout: float = option(
        0.0, "open: share of relations whose residual is dropped per training step", ge=0, le=1
    )
    max_source_length: int = option(64, "question tokens kept", ge=1)
    epochs: int = option(10, "training epochs (trainer.max_epochs follows this one)", ge=1)
    batch_size: int = option(32, "questions per optimiser step (the global batch, see batch_scope)", ge=1)
    optim: GSROptim = option(GSROptim(), "the optimiser")
    revision: str | None = option(None, "the hub revision of pretrained")


@dataclass
class MiniLMDecoder:
    layers: int = option(2, "decoder layers", ge=1)
    heads: int = option(6, "attention heads", ge=1)
    intermediate_size: int = option(1536, "feed-forward width", ge=1)
    dropout: float = option(0.1, "dropout", ge=0, le=1)
    max_positions: int = option(16, "longest output in tokens", ge=1)


@dataclass
class GSRModelMiniLM:
    name: str = option("gsr_minilm", "the model file's name (conf/model/NAME.yaml)")
    family: str = option("minilm", "the model family (the runner that trains it)")
    pretrained: str | None = option(None, "a BERT folder for the encoder (null: the offline MiniLM-L6)")
    decoder: MiniLMDecoder = option(MiniLMDecoder(), "the new small BERT decoder over relation tokens")
    relation_init: RelationInit = option("words", "relation tokens start random, or from the embedding of their words")
    relation_head: RelationHead = option(
        "token",
        "token: one learned vector per relation | open: vectors from the relation's words (decodes unseen ones)",
    )
    relation_residual: bool = option(True, "open: plus a learned per-relation residual for the training relations")
    relation_residual_dropout: float = option(
        0.0, "open: share of relations whose residual is dropped per training step", ge=0, le=1
    )
    freeze_encoder_embeddings: bool = option(True, "freeze the encoder's word embeddings (saves their update)")
    freeze_encoder_layers: int = option(0, "encoder layers frozen, from the bottom", ge=0)
    max_source_length: int = option(48, "question tokens kept", ge=1)
    epochs: int = option(6, "training epochs (trainer.max_epochs follows this one)", ge=1)
    batch_size: int = option(64, "questions per optimiser step (the global batch, see batch_scope)", ge=1)
    optim: GSROptim = option(GSROptim(), "the optimiser")


# ------------------------------------------------------------------ classic / patterns / robustness
@dataclass
class PatternSource:
    """The union of the three sources' options (conf/patterns/{gold,gsr,llm}.yaml)."""

    source: Literal["gold", "gsr", "llm"] = option("gold", "gold chains | a GSR results file's chains | an LLM")
    chains: str = option("filtered", "gold: filtered (topic -> answer only) | raw (both directions)")
    max_chains: int = option(3, "patterns per question", ge=1)
    results: str | None = option(None, "gsr: a GSR results file (results_<split>.jsonl)")
    skip_unknown: bool = option(True, "gsr: rows for ids outside the split are counted and skipped")
    kind: str | None = option(None, "llm: the pattern format (null: the retriever's own, simgrag | safe)")
    system: str | None = option(None, "llm: a system prompt file instead of the retriever's")
    user: str | None = option(None, "llm: a user prompt file instead of the retriever's")
    limit: int | None = option(None, "llm: first N questions only (the rest get no pattern)", ge=1)


@dataclass
class RobustnessRun:
    methods: list[str] = option(["swap", "replace", "rewire", "delete"], "the perturbations (OKGQA-P)")
    levels: list[float] = option([0.2, 0.4, 0.6, 0.8, 1.0], "fraction of each question's edges perturbed")
    seed: int = option(0, "seed of the perturbations")
    protect_gold: bool = option(False, "true: gold shortest-path edges are never perturbed")
    max_questions: int | None = option(None, "evaluate on the first N questions only", ge=1)
    threads: int | None = option(1, "torch threads (null: torch default)", ge=1)
    kge: KGEConfig = option(KGEConfig(), "triple plausibility scorer (torch_geometric.nn.kge) for ATS and replacement")
    retrievers: dict = option({}, "name -> options of any registered retriever (checked by each retriever)")


@dataclass
class GEvalRun:
    """G-Eval: the criteria rated and how a rating is read (gsr_train.openended.stages.geval)."""

    criteria: list[str] = option(
        ["context_relevance", "comprehensiveness", "correctness", "empowerment"], "the criteria rated"
    )
    method: Literal["auto", "logprobs", "samples"] = option(
        "auto", "auto (log-probabilities when returned, else samples) | logprobs | samples"
    )
    samples: int = option(5, "ratings sampled per answer (method=samples)", ge=1)
    temperature: float = option(1.0, "sampling temperature of the ratings", ge=0)
    max_tokens: int = option(3, "most tokens of a rating", ge=1)


@dataclass
class JudgeCalibration:
    per_question: int = option(
        1, "true facts per graph, each with a relation-swapped and an entity-replaced copy", ge=1
    )
    max_facts: int | None = option(150, "most true facts judged (null: all)", ge=1)
    seed: int = option(0, "seed of the facts picked and perturbed")


@dataclass
class PerturbGrid:
    """The OKGQA-P grid of ``+experiment=okgqa_perturbed`` (gsr_train.robustness.perturb)."""

    methods: list[str] = option(["swap", "replace", "rewire", "delete"], "the perturbations")
    levels: list[float] = option([0.5, 1.0], "fraction of each question's edges perturbed")
    seed: int = option(0, "seed of the perturbations")
    kge: KGEConfig = option(KGEConfig(), "triple plausibility scorer for ATS and replacement")


@dataclass
class OpenEndedRun:
    """OKGQA's open-ended evaluation (conf/recipes/okgqa_defaults.yaml is generated from it)."""

    questions: str = option(
        "embedded", "embedded (webqsp_mini test) | a questions .jsonl | OKGQA's filtered_questions CSV"
    )
    max_questions: int | None = option(50, "first N questions (null: all)", ge=1)
    skip_unknown: bool = option(False, "true: questions about graphs the split lacks are counted and skipped")
    skip_no_entity: bool = option(False, "true: OKGQA CSV rows that list no entity ({}) are counted and skipped")
    entity_prefix: str = option(
        "http://dbpedia.org/resource/",
        "with data.kg: a question's entity is this prefix + its resource name (DBpedia's IRIs); '': its label",
    )
    forms: list[str] = option(
        ["none", "triplets"], "evidence forms: none (closed book) | triplets | paths | subgraphs | a label of results"
    )
    results: dict = option({}, "label: results_<split>.jsonl of any retriever (its ranked triples)")
    knowledge: str = option("graph", "what facts are checked against: graph | evidence | a text file")
    answer_tokens: int = option(160, "most tokens per answer", ge=1)
    repetition_penalty: float | None = option(
        1.3, "sent with the answers to the project's own server (llm.autostart); null: never", gt=0
    )
    facts: Literal["llm", "sentences"] = option(
        "llm", "llm: each sentence broken into atomic facts by the LLM (FActScore) | sentences"
    )
    fact_tokens: int = option(96, "most tokens of the atomic-facts answer", ge=1)
    max_facts: int = option(10, "sentences split, and atomic facts kept, per answer", ge=1)
    verifiers: list[Literal["encoder", "llm"]] = option(
        ["encoder", "llm"], "who checks each fact against the KG", min_length=1
    )
    encoder_candidates: int = option(32, "KG lines (most words in common) the encoder compares a fact with", ge=1)
    llm_lines: int = option(10, "KG lines the LLM judge sees per fact", ge=1)
    gamma: int = option(10, "FActScore's length penalty exp(1 - gamma / facts) under gamma facts", ge=0)
    threads: int | None = option(2, "requests / torch threads (null: torch default)", ge=1)
    geval: GEvalRun = option(GEvalRun(), "G-Eval ratings of the answers")
    calibration: JudgeCalibration = option(
        JudgeCalibration(), "+experiment=okgqa_calibration: the judges on known facts"
    )
    perturb: PerturbGrid = option(PerturbGrid(), "+experiment=okgqa_perturbed: the OKGQA-P grid")


@dataclass
class EdgeTrain:
    """How a trainable retriever (an EdgeScorerModule) trains."""

    epochs: int = option(10, "training epochs", ge=1)
    graphs_per_batch: int = option(16, "question graphs per optimiser step (global under DDP, batch_scope)", ge=1)
    eval_graphs_per_batch: int = option(64, "graphs scored at once (validation and inference)", ge=1)
    patience: int | None = option(4, "epochs without a better val/sp_recall@val_k before stopping (null: never)", ge=0)
    val_k: int = option(20, "the K of the validation recall that picks the best checkpoint", ge=1)
    loss: EdgeLoss = option(EdgeLoss(), "the training loss: BCE plus an optional listwise term")


@dataclass
class RetrieverSpec:
    """``+experiment=retrieve``'s retriever: a registered ``name`` or an import path (``_target_``),
    and the options its factory takes (each retriever checks its own)."""

    name: str = option("cosine", "a registered retriever (conf/retriever/NAME.yaml, or an entry point)")
    _target_: str | None = option(None, "or an import path pkg.module.Class of a retriever outside gsr-train")
    options: dict = option({}, "the options its factory takes (each retriever checks its own)")
    train: EdgeTrain = option(EdgeTrain(), "trainable retrievers (an EdgeScorerModule) train first")


@dataclass
class GSRRetrieverOptions(GSRRun):
    """``retriever=gsr`` on ``+experiment=retrieve``: a trained GSR to score (``model``: a saved model
    folder or .ckpt; ``results``: a GSR results file), else the recipe of the one it trains, the GSR
    experiments' ``gsr`` section (the same keys and defaults; ``decode.top_n``: the chains kept)."""

    model: str | None = option(None, "a trained GSR to score: <run>/model or a .ckpt (null: train one)")
    results: str | None = option(None, "a GSR run's results file to score instead of decoding")


@dataclass
class GSRRetrieverSpec:
    """`RetrieverSpec` of ``retriever=gsr``, its options typed."""

    name: str = option("gsr", "the GSR retriever (conf/retriever/gsr.yaml)")
    _target_: str | None = option(None, "unused for retriever=gsr (a target makes it another retriever)")
    options: GSRRetrieverOptions = option(GSRRetrieverOptions(), "the GSR recipe: the GSR experiments' gsr section")
    train: EdgeTrain = option(EdgeTrain(), "fixed for GSR (its recipe is retriever.options)")


def retriever_spec(node: Mapping[str, Any]) -> type:
    """The dataclass of a retrieve run's ``retriever`` section: GSR's options are typed."""
    return GSRRetrieverSpec if node.get("name") == "gsr" and not node.get("_target_") else RetrieverSpec


# ------------------------------------------------------------------ recipes
Section = type | Callable[[Mapping[str, Any]], type]  # a dataclass, or one picked by the section's values


@dataclass(frozen=True)
class Recipe:
    """A runner's options: extra top-level keys and one dataclass per section, with the file that
    defines them (named in errors)."""

    file: str
    top_level: tuple[str, ...] = ()
    sections: Mapping[str, Section] = field(default_factory=dict)
    top: type = TopLevel  # types, ranges and descriptions of the top-level keys
    families: tuple[str, ...] = ()  # model.family values the runner trains (conf/model/*.yaml)


MODEL_FAMILIES: dict[str, type] = {"subgraphrag": SubgraphRAGModel, "t5": GSRModelT5, "minilm": GSRModelMiniLM}


def model_options(node: Mapping[str, Any]) -> type:
    """The dataclass of a ``model`` section: the one of its ``family``."""
    return MODEL_FAMILIES.get(str(node.get("family")), SubgraphRAGModel)


RECIPES: dict[str, Recipe] = {
    "subgraphrag": Recipe(
        "conf/recipes/subgraphrag_defaults.yaml",
        ("top_k",),
        {"subgraphrag": SubgraphRAGRun, "model": model_options},
        SubgraphRAGTop,
        ("subgraphrag",),
    ),
    "gsr": Recipe(
        "conf/recipes/gsr_defaults.yaml",
        ("top_k",),
        {"gsr": GSRRun, "model": model_options},
        GSRTop,
        ("t5", "minilm"),
    ),
    "reader": Recipe(
        "conf/recipes/reader_defaults.yaml",
        ("top_k",),
        {"qa": QARun, "reader": ReaderModel, "llm": LLMConfig},
        ReaderTop,
    ),
    "cosine": Recipe("conf/experiment/cosine_baseline.yaml", ("split", "top_k", "cosine_mode"), top=CosineTop),
    "retrieve": Recipe(
        "conf/experiment/retrieve.yaml",
        ("split", "top_k", "train_split", "val_split", "eval_only"),
        {"retriever": retriever_spec, "model": model_options},  # model: retriever=gsr's (conf/retriever/gsr.yaml)
        RetrieveTop,
    ),
    "classic": Recipe("conf/recipes/classic_defaults.yaml", ("split", "top_k"), {"classic": ClassicRun}, ClassicTop),
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
    "conf/recipes/okgqa_defaults.yaml",
    ("split", "top_k"),
    {"open_ended": OpenEndedRun, "classic": ClassicRun, "llm": LLMConfig},
    OpenEndedTop,
)
RECIPES.update({"open_ended": _OPEN_ENDED, "judge_calibration": _OPEN_ENDED, "open_ended_perturbed": _OPEN_ENDED})

# options that took the one name of their concept (the README's glossary), by runner
RENAMED = {
    "subgraphrag": {"subgraphrag.top_k": "top_k"},
    "gsr": {"gsr.decode.top_n": "top_k"},
    "reader": {"qa.k": "top_k"},
    "robustness": {"robustness.report_k": "top_k"},
}
