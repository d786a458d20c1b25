"""SimGRAG and SAFE behind the retriever interface: patterns are built once per question of the
served split (from gold chains, a GSR results file or an LLM), then matched against whatever
graphs ``score`` is given (the split itself or a perturbed copy); an edge scores by the rank of
the first retrieved subgraph that holds it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gsr_train.kg.index import SplitGraphs
from gsr_train.patterns.build import build_patterns
from gsr_train.patterns.retrieve import subgraph_scores
from gsr_train.retrievers.interface import RetrievalInputs, Scores
from gsr_train.retrievers.options import SAFEConfig, SimGRAGConfig
from gsr_train.retrievers.safe import safe_retrieve
from gsr_train.retrievers.simgrag import simgrag_retrieve
from gsr_train.text.encoders import load_encoder

if TYPE_CHECKING:
    from gsr_train.patterns.retrieve import PatternRun

METHODS = ("simgrag", "safe")


class PatternRetriever:
    """``options``: the method's own settings (`gsr_train.retrievers.options.SimGRAGConfig` /
    `gsr_train.retrievers.options.SAFEConfig`) plus ``patterns`` (the source block, default
    gold chains) and ``llm`` (the endpoint, for ``patterns.source: llm``)."""

    def __init__(self, method: str, options: Mapping[str, Any], inputs: RetrievalInputs) -> None:

        if method not in METHODS:
            raise ValueError(f"pattern retriever must be one of {METHODS}, got {method!r}")
        if inputs.split_name is None:
            raise ValueError(
                f"retriever {method!r} needs the split's name (RetrievalInputs.split_name): "
                "its patterns come from that split's questions"
            )
        options = dict(options)
        source = dict(options.pop("patterns", None) or {"source": "gold"})
        llm = options.pop("llm", None)
        self.name, self.method, self.inputs = method, method, inputs
        self.config = self._config(options)  # checked before the patterns are built
        self.encoder = load_encoder(inputs.encoder) if isinstance(inputs.encoder, (str, Mapping)) else inputs.encoder
        self.patterns, self.source_stats = build_patterns(
            inputs.index, inputs.split_name, source, method, inputs.cache_dir, llm
        )
        ids = inputs.index[inputs.split_name].ids
        self._row = {qid: i for i, qid in enumerate(ids)}
        self.run: PatternRun | None = None  # the last PatternRun (subgraphs, search statistics)

    def _config(self, options: Mapping[str, Any]):
        if self.method == "simgrag":
            return SimGRAGConfig.from_mapping(options)

        return SAFEConfig.from_mapping(options)

    def patterns_for(self, split: SplitGraphs) -> list:
        """The patterns of ``split``'s questions, matched by question id (a subset or a perturbed copy
        of the served split keeps its ids)."""
        missing = [qid for qid in split.ids if qid not in self._row]
        if missing:
            raise ValueError(
                f"retriever {self.method!r}: {len(missing)} questions are not in split "
                f"{self.inputs.split_name!r} its patterns were built for, e.g. {missing[:3]}"
            )
        return [self.patterns[self._row[qid]] for qid in split.ids]

    def score(self, split: SplitGraphs) -> Scores:

        index, emb, cache = self.inputs.index, self.inputs.embeddings, self.inputs.cache_dir
        patterns = self.patterns_for(split)
        extra: dict[str, Any] = {"patterns": self.source_stats}
        if self.method == "simgrag":
            run = simgrag_retrieve(index, split, emb, patterns, self.config, self.encoder, cache)
        else:
            run, astats = safe_retrieve(index, split, emb, patterns, self.config, self.encoder, cache)
            extra["join"] = astats.to_dict()
        self.run = run
        extra["search"] = run.summary()
        return subgraph_scores(split, run.subgraphs), extra
