"""One question of a trained run over a whole KG: link, cut, retrieve (``gsr-train ask``).

    from gsr_train.runs.pipeline import Pipeline
    pipeline = Pipeline.from_run("outputs/subgraphrag_quickstart/<time>", kg="my_kg_store")
    answer = pipeline.ask("what is the nationality of justin bieber")
    answer.entities, answer.evidence[:5]

The KG is a store folder or a SPARQL endpoint's URL (`gsr_train.runs.ask_kg`). The question's topic
entities come from the linker unless given (a store's fuzzy linker, `gsr_train.kg.linking`; an
endpoint's label lookups, `gsr_train.kg.label_linking`), its graph is cut as ``data.kg`` cuts it
(the run's ``data.extract``), and the run's SubgraphRAG scorer ranks every triple of it. A store's
names are embedded once with the run's encoder, through the embedding cache, so every call after the
first costs the cut and the scoring only; an endpoint's graph is embedded as it arrives. The scorer
projects the cut graph's entities alone, so the KG may have any size.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from gsr_train.config import as_dict, default_cache_dir
from gsr_train.data.errors import PreflightError
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.sparql import probe
from gsr_train.kg.sparql_options import SparqlOptions, is_endpoint
from gsr_train.options.eval_config import find_source
from gsr_train.readers.interface import Reader, ReadingInputs
from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever
from gsr_train.runs.ask_kg import AskKG, open_ask_kg
from gsr_train.runs.reader import reader_of_run
from gsr_train.text.encoders import TextEncoder, load_encoder


@dataclass
class Evidence:
    head: str
    relation: str
    tail: str
    score: float


@dataclass
class Answer:
    """What `Pipeline.ask` found: the topic entities (with the linker's scores), the graph's size
    and its best triples, and where the time went."""

    question: str
    entities: list[tuple[str, float]]
    triples: int
    evidence: list[Evidence]
    seconds: dict[str, float] = field(default_factory=dict)
    answers: list[str] = field(default_factory=list)  # the reader's, best first (no reader: empty)
    reading: str | None = None  # the reader's raw response


def _evidence(triple: tuple[str, str, str], score: float) -> Evidence:
    head, relation, tail = triple
    return Evidence(head, relation, tail, round(score, 4))


class Pipeline:
    """A trained SubgraphRAG run over a KG store or a SPARQL endpoint (see the module docstring)."""

    def __init__(
        self,
        retriever: SubgraphRAGRetriever,
        encoder: TextEncoder,
        kg: AskKG,
        top_k: int = 10,
        reader: tuple[Reader, ReadingInputs] | None = None,
    ) -> None:
        self.retriever, self.encoder, self.kg = retriever, encoder, kg
        self.top_k = top_k
        self.reader = reader

    @classmethod
    def from_run(
        cls,
        run: str | Path,
        kg: str | Path,
        cache_dir: str | Path | None = None,
        top_k: int = 10,
        reader: str | Path | None = None,
        graph: str | None = None,
    ) -> Pipeline:
        """The run (a folder, or a checkpoint in one) and the KG (a store folder or an endpoint's URL);
        ``cache_dir``: the embedding and SPARQL caches; ``reader``: a trained reader run (``reader_*``)
        that answers from the run's best triples; ``graph``: the endpoint's named graph to ask. The run's
        ``data.extract`` and ``data.sparql`` apply."""
        source = find_source(run)
        if source.method != "subgraphrag":
            raise PreflightError(f"{run}: ask reads SubgraphRAG runs; this is a {source.method} run")
        cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        reading = reader_of_run(reader, cache) if reader is not None else None  # a wrong folder: before any work
        encoder_cfg = {str(k): v for k, v in as_dict(source.config.get("encoder") or {}).items()}
        encoder = load_encoder({**encoder_cfg, "device": "cpu"})
        extract, sparql = (OmegaConf.select(source.config, f"data.{k}", default=None) for k in ("extract", "sparql"))
        extract_options = ExtractOptions(**as_dict(extract)) if extract is not None else ExtractOptions()
        sparql_options = SparqlOptions(**as_dict(sparql)) if sparql is not None else SparqlOptions()
        if graph is not None:
            sparql_options = replace(sparql_options, graph=graph)
        if is_endpoint(kg):
            probe(str(kg), sparql_options)  # an endpoint that does not answer: one line before any loading
        graphs = open_ask_kg(kg, encoder, encoder_cfg, cache, extract_options, sparql_options)
        retriever = SubgraphRAGRetriever.from_checkpoint(source.checkpoint, serving="torch")
        return cls(retriever, encoder, graphs, top_k, reading)

    def ask(self, question: str, entities: Sequence[str] | None = None) -> Answer:
        """Link (or find ``entities`` by name), cut the graph, score its triples: the best ``top_k``."""
        t0 = time.perf_counter()
        topics = self.kg.topics(question, entities)
        if not topics:
            raise PreflightError(f"no entity of {self.kg.where} is named in {question!r}")
        t1 = time.perf_counter()
        cut = self.kg.cut(question, [e for e, _ in topics])
        t2 = time.perf_counter()
        question_emb = self.encoder.encode([question])[0]
        self.retriever.clear_projections()  # this question's entities alone
        scores = self.retriever.score_question(cut.graph, question_emb, cut.emb)
        order = torch.argsort(scores, descending=True, stable=True).numpy()
        t3 = time.perf_counter()
        names = self.kg.names([e for e, _ in topics])
        best = order[: self.top_k].tolist()
        answer = Answer(
            question,
            [(n, s) for n, (_, s) in zip(names, topics)],
            len(cut.triples),
            [_evidence(cut.triples[i], float(scores[i])) for i in best],
            {"link": t1 - t0, "cut": t2 - t1, "score": t3 - t2},
        )
        if self.reader is not None:
            self._read(answer, cut.triples, scores, order, names)
            answer.seconds["read"] = time.perf_counter() - t3
        return answer

    def _read(self, answer: Answer, triples: list, scores: torch.Tensor, order: np.ndarray, topics: list[str]) -> None:
        """The reader's answer from the reader's own number (``top_k``) of best triples."""
        reader, inputs = self.reader  # type: ignore[misc]
        best = order[: max(inputs.k, 1)].tolist()
        row = {"id": "ask", "triples": [list(triples[i]) for i in best], "scores": [float(scores[i]) for i in best]}
        question = {
            "id": "ask",
            "question": answer.question,
            "answers": [],
            "in_kg": True,
            "hops": -1,
            "topics": topics,
        }
        (reading,) = reader.answer(reader.prepare([question], {"ask": row}))
        answer.answers, answer.reading = list(reading.answers), reading.text
