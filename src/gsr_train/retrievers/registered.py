"""The built-in retrievers behind `gsr_train.retrievers.interface`: cosine, SubgraphRAG
(a trained checkpoint), the classic ones (triplets, paths, PCST; PPR pruning as an option), PPR
on its own, GSR (chains decoded once, executed on any version of the graphs) and the pattern
retrievers SimGRAG and SAFE (patterns built once, matched on any version of the graphs)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gsr_train.kg.index import SplitGraphs
from gsr_train.retrievers.classic import classic_scores
from gsr_train.retrievers.cosine import cosine_scores
from gsr_train.retrievers.edge_scorer import TrainedEdgeScorer
from gsr_train.retrievers.gsr_chains import GSRChains
from gsr_train.retrievers.interface import REGISTRY, RetrievalInputs, Scores, register
from gsr_train.retrievers.pattern_retriever import PatternRetriever
from gsr_train.retrievers.ppr import ppr_edge_scores
from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever, check_compatible

if TYPE_CHECKING:
    import torch


def _question_emb(inputs: RetrievalInputs, name: str) -> torch.Tensor:
    """The served questions' embeddings, which ``name`` scores against."""
    if inputs.question_emb is None:
        raise ValueError(f"retriever {name!r} needs the questions' embeddings (RetrievalInputs.question_emb)")
    return inputs.question_emb


class CosineRetriever:
    """cos(q, h) + cos(q, r) + cos(q, t) with the frozen encoder (no training)."""

    name = "cosine"

    def __init__(self, inputs: RetrievalInputs) -> None:
        self.inputs = inputs

    def score(self, split: SplitGraphs) -> Scores:

        return cosine_scores(split, _question_emb(self.inputs, self.name), self.inputs.embeddings), {}


class SubgraphRAGScores:
    """A trained SubgraphRAG checkpoint; DDE features are computed on the graphs it is given."""

    name = "subgraphrag"

    def __init__(self, checkpoint: str, inputs: RetrievalInputs, serving: str = "auto") -> None:

        self.inputs = inputs
        self.retriever = SubgraphRAGRetriever.from_checkpoint(
            checkpoint, device=inputs.device or "cpu", serving=serving
        )
        check_compatible(self.retriever.hparams, inputs.embeddings)

    def score(self, split: SplitGraphs) -> Scores:
        questions = _question_emb(self.inputs, self.name)
        return self.retriever.score_split(split, questions, self.inputs.embeddings, features=None), {}


class ClassicRetriever:
    """OKGQA / G-Retriever prize-based retrieval: ``triplets``, ``paths`` or ``pcst``."""

    def __init__(self, method: str, inputs: RetrievalInputs, options: Mapping[str, Any] | None = None) -> None:
        self.name = f"classic-{method}"
        self.method, self.inputs, self.options = method, inputs, dict(options or {})

    def score(self, split: SplitGraphs) -> Scores:

        return classic_scores(
            split, _question_emb(self.inputs, self.name), self.inputs.embeddings, self.method, self.options or None
        ), {}


@register("cosine")
def _cosine(inputs: RetrievalInputs, **options: Any) -> CosineRetriever:
    return CosineRetriever(inputs)


@register("subgraphrag")
def _subgraphrag(inputs: RetrievalInputs, **options: Any) -> SubgraphRAGScores:
    if not options.get("checkpoint"):
        raise ValueError("retriever 'subgraphrag' needs options.checkpoint (a trained best-*.ckpt)")
    return SubgraphRAGScores(str(options["checkpoint"]), inputs, str(options.get("serving", "auto")))


@register("trained")
def _trained(inputs: RetrievalInputs, **options: Any):

    known = {"checkpoint", "graphs_per_batch", "device"}
    unknown = set(options) - known
    if unknown:
        raise ValueError(f"retriever 'trained': unknown options {sorted(unknown)} (known: {sorted(known)})")
    if not options.get("checkpoint"):
        raise ValueError("retriever 'trained' needs options.checkpoint (a checkpoint of a trained triple scorer)")
    return TrainedEdgeScorer(
        str(options["checkpoint"]),
        inputs,
        int(options.get("graphs_per_batch") or 64),
        str(options.get("device") or inputs.device or "cpu"),
    )


# trainable: train.py +experiment=gnnrag_webqsp_mini (or retrieve retriever.name=gnn-rag) trains it;
# its checkpoint is then served as retriever 'trained'. Deferred: its module imports PyG.
REGISTRY.register_deferred("gnn-rag", "gsr_train.models.gnn_rag.GNNRAG")


for _method in ("triplets", "paths", "pcst"):

    def _classic(inputs: RetrievalInputs, _m: str = _method, **options: Any) -> ClassicRetriever:
        return ClassicRetriever(_m, inputs, options)

    register(f"classic-{_method}")(_classic)


@register("gsr")
def _gsr(inputs: RetrievalInputs, **options: Any):

    if inputs.split is None:
        raise ValueError("retriever 'gsr' needs the split whose questions it decodes (RetrievalInputs.split)")
    top_n = int((options.get("decode") or {}).get("top_n", 3))
    if (options.get("decode") or {}).get("constrained"):
        raise ValueError(
            "retriever 'gsr' decodes once, without the graphs, and executes the chains on whatever graphs it "
            "is given: constrained decoding is +experiment=retrieve retriever=gsr's (retriever.options.model=...)"
        )
    index = inputs.index
    if options.get("model"):
        chains = GSRChains.decode(
            options["model"], inputs.split.questions, index.relations, options.get("decode"), inputs.device
        )
        return chains.with_paths(index.entities, index.relations)
    if options.get("results"):
        return GSRChains.from_results(options["results"], inputs.split, index.relations, top_n).with_paths(
            index.entities, index.relations
        )
    raise ValueError("retriever 'gsr' needs options.model (a saved GSR model) or options.results (a results file)")


class PPRRetriever:
    """Personalised PageRank from the topic entities (OKGQA's pruning step as a retriever): edges
    ranked so that the top ones are those among the highest-PPR entities."""

    name = "ppr"

    def __init__(self, options: Mapping[str, Any]) -> None:
        unknown = set(options) - {"alpha", "iters"}
        if unknown:
            raise ValueError(f"retriever 'ppr': unknown options {sorted(unknown)} (known: alpha, iters)")
        self.alpha, self.iters = float(options.get("alpha", 0.15)), int(options.get("iters", 30))

    def score(self, split: SplitGraphs) -> Scores:

        return ppr_edge_scores(split, self.alpha, self.iters), {}


@register("ppr")
def _ppr(inputs: RetrievalInputs, **options: Any) -> PPRRetriever:
    return PPRRetriever(options)


@register("simgrag")
def _simgrag(inputs: RetrievalInputs, **options: Any):

    return PatternRetriever("simgrag", options, inputs)


@register("safe")
def _safe(inputs: RetrievalInputs, **options: Any):

    return PatternRetriever("safe", options, inputs)
