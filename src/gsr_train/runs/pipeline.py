"""One question of a trained run over a whole-KG store: link, cut, retrieve (``gsr-train ask``).

    from gsr_train.runs.pipeline import Pipeline
    pipeline = Pipeline.from_run("outputs/subgraphrag_quickstart/<time>", kg="my_kg_store")
    answer = pipeline.ask("what is the nationality of justin bieber")
    answer.entities, answer.evidence[:5]

The question's topic entities come from the linker (:mod:`gsr_train.kg.linking`) unless given, its
graph is cut from the store as ``data.kg`` cuts it (the run's ``data.extract``), and the run's
SubgraphRAG scorer ranks every triple of it. The store's entity and relation names are embedded once
with the run's encoder, through the embedding cache, so every call after the first costs the cut and
the scoring only. The scorer projects the cut graph's entities alone, so the store may have any size.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from gsr_train.config import as_dict, default_cache_dir
from gsr_train.data.errors import PreflightError
from gsr_train.kg.extract import Extractor
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.index import QuestionGraph
from gsr_train.kg.linking import EntityLinker
from gsr_train.kg.store import KGStore, open_store
from gsr_train.options.eval_config import find_source
from gsr_train.readers.interface import Reader, ReadingInputs
from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever
from gsr_train.runs.reader import reader_of_run
from gsr_train.text.embeddings import KGEmbeddings
from gsr_train.text.encoders import TextEncoder, load_encoder
from gsr_train.text.store_embeddings import store_embeddings


@dataclass
class Evidence:
    head: str
    relation: str
    tail: str
    score: float


@dataclass
class Answer:
    """What :meth:`Pipeline.ask` found: the topic entities (with the linker's scores), the graph's size
    and its best triples, and where the time went."""

    question: str
    entities: list[tuple[str, float]]
    triples: int
    evidence: list[Evidence]
    seconds: dict[str, float] = field(default_factory=dict)
    answers: list[str] = field(default_factory=list)  # the reader's, best first (no reader: empty)
    reading: str | None = None  # the reader's raw response


class Pipeline:
    """A trained SubgraphRAG run over a KG store (see the module docstring)."""

    def __init__(
        self,
        retriever: SubgraphRAGRetriever,
        encoder: TextEncoder,
        store: KGStore,
        emb: KGEmbeddings,
        extract: ExtractOptions,
        top_k: int = 10,
        reader: tuple[Reader, ReadingInputs] | None = None,
    ) -> None:
        self.retriever, self.encoder, self.store, self.emb = retriever, encoder, store, emb
        self.linker = EntityLinker(store)
        self.extractor = Extractor(store, extract)
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
    ) -> Pipeline:
        """The run (a folder, or a checkpoint in one) and the store; ``cache_dir``: the embedding cache;
        ``reader``: a trained reader run (``reader_*``) that answers from the run's best triples."""
        source = find_source(run)
        if source.method != "subgraphrag":
            raise PreflightError(f"{run}: ask reads SubgraphRAG runs; this is a {source.method} run")
        cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        reading = reader_of_run(reader, cache) if reader is not None else None  # a wrong folder: before any work
        store = open_store(kg)
        encoder_cfg = {str(k): v for k, v in as_dict(source.config.get("encoder") or {}).items()}
        encoder = load_encoder({**encoder_cfg, "device": "cpu"})
        emb = store_embeddings(store, encoder, encoder_cfg, cache)
        extract = OmegaConf.select(source.config, "data.extract", default=None)
        options = ExtractOptions(**as_dict(extract)) if extract is not None else ExtractOptions()
        retriever = SubgraphRAGRetriever.from_checkpoint(source.checkpoint, serving="torch")
        return cls(retriever, encoder, store, emb, options, top_k, reading)

    def ask(self, question: str, entities: Sequence[str] | None = None) -> Answer:
        """Link (or find ``entities`` by name), cut the graph, score its triples: the best ``top_k``."""
        t0 = time.perf_counter()
        if entities:
            found = [self.store.entities_named(e) for e in entities]
            missing = [e for e, ids in zip(entities, found) if not ids.size]
            if missing:
                raise PreflightError(f"not in the KG store {self.store.folder}: {', '.join(map(repr, missing))}")
            topics = [(int(ids[0]), float("nan")) for ids in found]
        else:
            topics = self.linker.link(question, 1)
            if not topics:
                raise PreflightError(f"no entity of the KG store {self.store.folder} is named in {question!r}")
        t1 = time.perf_counter()
        edges = self.extractor.edges(np.array([e for e, _ in topics], dtype=np.int64))
        graph, local = self._graph(question, edges, [e for e, _ in topics])
        t2 = time.perf_counter()
        question_emb = self.encoder.encode([question])[0]
        self.retriever.clear_projections()  # this question's entities alone
        scores = self.retriever.score_question(graph, question_emb, local)
        best = torch.argsort(scores, descending=True, stable=True)[: self.top_k].numpy()
        t3 = time.perf_counter()
        names = [str(n) for n in self.store.display_names(np.asarray([e for e, _ in topics])).to_pylist()]
        answer = Answer(
            question,
            [(n, s) for n, (_, s) in zip(names, topics)],
            int(edges.size),
            self._evidence(edges[best], scores[best].tolist()),
            {"link": t1 - t0, "cut": t2 - t1, "score": t3 - t2},
        )
        if self.reader is not None:
            self._read(answer, edges, scores, names)
            answer.seconds["read"] = time.perf_counter() - t3
        return answer

    def _read(self, answer: Answer, edges: np.ndarray, scores: torch.Tensor, topics: list[str]) -> None:
        """The reader's answer from the reader's own number (``top_k``) of best triples."""
        reader, inputs = self.reader  # type: ignore[misc]
        best = torch.argsort(scores, descending=True, stable=True)[: max(inputs.k, 1)].numpy()
        row = {
            "id": "ask",
            "triples": [list(t) for t in self.store.triples(edges[best])],
            "scores": scores[best].tolist(),
        }
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

    def _graph(self, question: str, edges: np.ndarray, topics: list[int]) -> tuple[QuestionGraph, KGEmbeddings]:
        """The cut graph with local entity ids, and the embeddings of its entities alone."""
        s = self.store
        ends = np.concatenate([np.asarray(s.heads[edges]), np.asarray(s.tails[edges])]).astype(np.int64)
        nodes, local = np.unique(ends, return_inverse=True)
        index = torch.from_numpy(nodes)
        graph = QuestionGraph(
            "ask",
            question,
            [],
            torch.arange(nodes.size),
            torch.from_numpy(local.reshape(2, -1)),
            torch.from_numpy(np.asarray(s.rels[edges], dtype=np.int64)),
            torch.from_numpy(np.isin(nodes, topics)),
            torch.zeros(nodes.size, dtype=torch.bool),
        )
        e = self.emb
        emb = KGEmbeddings(
            e.entity[index].float(), e.entity_has_text[index], e.relation.float(), {}, e.dim, e.encoder_name
        )
        return graph, emb

    def _evidence(self, edges: np.ndarray, scores: list[float]) -> list[Evidence]:
        return [Evidence(h, r, t, round(float(x), 4)) for (h, r, t), x in zip(self.store.triples(edges), scores)]
