"""The options of the built-in untrained retrievers as typed dataclasses: the classic prize-based ones
(`.classic`), SimGRAG (`.simgrag`) and SAFE (`.safe`). Apart from their code so that the
option checks (`gsr_train.options`) read them without torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from gsr_train.config import dataclass_from_mapping, option

# ------------------------------------------------------------------ classic (triplets, paths, pcst)
EdgePrize = Literal["rank", "split"]


@dataclass
class ClassicPrizes:
    topk_nodes: int = option(10, "prize max(0, k - rank) for the k nodes most similar to the question", ge=0)
    topk_edges: int = option(10, "prize max(0, k - rank) for the k edges most similar to the question", ge=0)


@dataclass
class ClassicTriplets:
    edge_prize: EdgePrize = option("rank", "edge prizes: rank (OKGQA) | split (G-Retriever: ties share a rank's prize)")


@dataclass
class ClassicPaths:
    edge_prize: EdgePrize = option("rank", "edge prizes: rank (OKGQA) | split (G-Retriever)")
    starts: Literal["topic", "prize", "both"] = option(
        "topic", "where paths start: the topic entities | the num_starts highest-prize nodes (OKGQA) | both"
    )
    num_starts: int = option(5, "starts=prize: the highest-prize nodes paths start from", ge=1)
    max_len: int = option(3, "edges per path", ge=1)
    beam: int = option(20, "partial paths kept per question and step (the greedy priority queue)", ge=1)
    max_paths: int = option(50, "paths returned per question", ge=1)
    edge_cost: float = option(1.0, "cost of every edge a path takes", ge=0)
    chunk_questions: int = option(16, "questions searched at once (memory, not results)", ge=1)


@dataclass
class ClassicPCST:
    edge_prize: EdgePrize = option("split", "edge prizes: rank (OKGQA) | split (G-Retriever)")
    edge_cost: float = option(0.5, "cost of every edge (G-Retriever: just under the largest edge prize)", ge=0)
    budget: int | None = option(200, "most edges, cut in BFS order so the tree stays connected (null: no bound)", ge=1)
    pruning: Literal["none", "simple", "gw", "strong"] = option("gw", "pcst_fast's pruning of the tree")


@dataclass
class ClassicPPR:
    enabled: bool = option(False, "personalised PageRank pruning of the graph before retrieval (OKGQA app. A.5)")
    top_nodes: int = option(200, "nodes kept by the pruning", ge=1)
    alpha: float = option(0.15, "PageRank's restart probability", gt=0, lt=1)
    iters: int = option(30, "power iterations", ge=1)


@dataclass
class ClassicRun:
    """The classic retrievers' options (conf/recipes/classic_defaults.yaml is generated from them)."""

    method: Literal["triplets", "paths", "pcst"] = option(
        "triplets", "top-k triplets | greedy prize-cost paths | a PCST subgraph"
    )
    prizes: ClassicPrizes = option(ClassicPrizes(), "node and edge prizes from the frozen encoder's similarities")
    triplets: ClassicTriplets = option(ClassicTriplets(), "method=triplets: the highest-prize triples")
    paths: ClassicPaths = option(ClassicPaths(), "method=paths: greedy prize-cost paths")
    pcst: ClassicPCST = option(ClassicPCST(), "method=pcst: a prize-collecting Steiner tree (G-Retriever)")
    ppr: ClassicPPR = option(ClassicPPR(), "personalised PageRank pruning before any method")


# ------------------------------------------------------------------ SimGRAG
@dataclass
class SimGRAGConfig:
    k: int = option(100, "subgraphs kept per question", ge=1)
    k_node: int = option(16, "candidate entities per known pattern node (nearest by L2)", ge=1)
    k_rel: int = option(16, "candidate relations per known pattern relation", ge=1)
    prune: bool = option(True, "lower-bound pruning + greedy order (false: the plain Algorithm 1, same result)")
    max_partial: int | None = option(2_000_000, "per-pattern safety stop on partial matches (counted when hit)", ge=1)

    @classmethod
    def from_mapping(cls, cfg: Mapping | SimGRAGConfig | None) -> SimGRAGConfig:
        out = dataclass_from_mapping(cls, cfg, "simgrag", ("k", "k_node", "k_rel"))
        return out


# ------------------------------------------------------------------ SAFE
@dataclass
class SAFEConfig:
    k: int = option(100, "subgraphs kept per question (k_retrieval)", ge=1)
    k_schema: int = option(3, "candidate schema edges per pseudo edge", ge=1)
    k_qg: int = option(5, "aligned query graphs kept per pattern", ge=1)
    delta: int = option(1, "join threshold: schema hops between the types of a shared node (<= max_distance)", ge=0)
    k_ent: int = option(3, "SimEnt: candidate entities per pattern entity", ge=1)
    k_rel: int = option(10, "SimRel: candidate relations per pattern relation", ge=1)
    k_type: int = option(8, "SimTyp: candidate types per typed variable", ge=1)
    min_support: int = option(1, "schema edge pruning: least support (theta_supp)", ge=0)
    min_confidence: float = option(0.0001, "schema edge pruning: least confidence (theta_conf)", ge=0, le=1)
    max_distance: int = option(3, "schema distances are exact up to this many hops", ge=0)
    hard_types: bool = option(False, "a typed variable only matches entities with a SimTyp type (the paper)")
    prune: bool = option(True, "lower-bound pruning of the search (same result)")
    max_partial: int | None = option(2_000_000, "per-pattern safety stop on partial matches (counted when hit)", ge=1)

    @classmethod
    def from_mapping(cls, cfg: Mapping | SAFEConfig | None) -> SAFEConfig:
        out = dataclass_from_mapping(cls, cfg, "safe", ("k", "k_schema", "k_qg", "k_ent", "k_rel", "k_type"))
        if out.delta < 0 or out.delta > out.max_distance:
            raise ValueError(f"safe config: delta must be in 0..max_distance ({out.max_distance}), got {out.delta}")
        return out
