"""Retrieval on the whole KG beside its per-question form, and the vector index that makes it possible.

Part 1, webqsp_mini's test questions: the KG store is the union of the fixture's graphs (40,655
triples, every split), built with ``import-kg``. Each method runs twice on the same inputs:

* **SimGRAG, gold patterns**: per question, candidates are the ``k_node`` nearest entities of the
  question's graph; on the whole KG, the nearest of all the store's entities (its vector index),
  then the exact pruned search over the store.
* **GSR, gold chains**: the shortest-path relation chains (a perfect GSR's beams), executed from the
  topic entities on each question's graph, and on the whole store.

For each: answer hit (an answer entity among the retrieved triples' entities), answer recall, triples
retrieved and ms a question (search only; MiniLM embeddings and the store's vector index are built
first, and cached).

Part 2, the vector index at size: ``--sizes`` generated clustered 384-d tables (3,000 centres, like
sentence embeddings of names): the flat (exact) index against the inverted file (approximate) one,
build time, ms a query, recall@16 of the approximate one against the exact, and peak RSS. The size
above which ``VectorIndexOptions.exact_below`` turns approximate is read from it.

    .venv/bin/python bench/bench_whole_kg.py [--limit N] [--sizes 100000,1000000] [--work DIR]

Writes the tables and ``bench/results/bench_whole_kg.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from benchutil import peak_rss_mb, save_figures
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
DATA = ROOT.parent / "shared" / "data" / "webqsp_mini"


def union_tsv(data: Path, out: Path) -> Path:
    """Every distinct triple of the fixture's graphs, one TSV line each."""
    seen: dict[tuple, None] = {}
    for split in ("train", "validation", "test"):
        with gzip.open(data / f"{split}.jsonl.gz", "rt") as f:
            for line in f:
                seen.update((tuple(t), None) for t in json.loads(line)["graph"])
    out.write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in seen))
    return out


def answer_figures(answers: list[list[str]], retrieved: list[set[str]]) -> dict:
    hit = [bool(set(a) & r) for a, r in zip(answers, retrieved) if a]
    recall = [len(set(a) & r) / len(set(a)) for a, r in zip(answers, retrieved) if a]
    return {"answer_hit": round(float(np.mean(hit)), 4), "answer_recall": round(float(np.mean(recall)), 4)}


def entities_of(triples: np.ndarray) -> set[str]:
    return {x for h, _, t in triples for x in (h, t)}


def per_question_names(split, edges_per_q: list[list[int]], index) -> list[np.ndarray]:
    out = []
    for q, local in enumerate(edges_per_q):
        base = int(split.edge_ptr[q])
        glob = split.global_edges_at(torch.tensor([base + e for e in local], dtype=torch.long)).reshape(-1, 3)
        out.append(np.array([[index.entities[h], index.relations[r], index.entities[t]] for h, r, t in glob.tolist()]))
    return out


def store_names(store, edges: np.ndarray) -> np.ndarray:
    if edges.size == 0:
        return np.zeros((0, 3), dtype=object)
    h = store.entities.take(np.asarray(store.heads[edges], dtype=np.int64))
    t = store.entities.take(np.asarray(store.tails[edges], dtype=np.int64))
    r = store.relations.take(np.asarray(store.rels[edges], dtype=np.int64))
    return np.array(list(zip(h, r, t)), dtype=object)


def simgrag_rows(index, split_name, emb, store_vectors, patterns, cache, n: int) -> list[dict]:
    from gsr_train.retrievers.options import SimGRAGConfig
    from gsr_train.retrievers.simgrag import simgrag_retrieve
    from gsr_train.retrievers.simgrag_kg import simgrag_store_retrieve

    split = index[split_name]
    cfg = SimGRAGConfig(k=10, k_node=16, k_rel=16)
    per_q = simgrag_retrieve(index, split, emb, patterns, cfg)
    whole = simgrag_store_retrieve(store_vectors, patterns, cfg, cache_dir=cache)
    local = [sorted({e for s in subs for e in s.edges}) for subs in per_q.subgraphs]
    rows = []
    for form, triples, run in (
        ("per question", per_question_names(split, local, index), per_q),
        (
            "whole KG",
            [
                store_names(store_vectors.store, np.array(sorted({e for s in subs for e in s.edges}), dtype=np.int64))
                for subs in whole.subgraphs
            ],
            whole,
        ),
    ):
        figures = answer_figures(split.answers[:n], [entities_of(t) for t in triples[:n]])
        rows.append(
            {
                "method": "SimGRAG (gold patterns, k=10)",
                "form": form,
                **figures,
                "triples": round(float(np.mean([len(t) for t in triples[:n]])), 1),
                "ms_per_question": round(1000 * float(np.mean(run.seconds[:n])), 2),
                "no_match": run.no_match,
            }
        )
    rows[-1]["median_region_edges"] = whole.summary()["median_region_edges"]
    return rows


def gsr_rows(index, split_name, store, chains, n: int) -> list[dict]:
    from gsr_train.retrievers.gsr_chains import GSRChains
    from gsr_train.retrievers.gsr_kg import gsr_store_retrieve

    split = index[split_name]
    beams = [[(tuple(c), 1.0 - 0.01 * i) for i, c in enumerate(per_q)] for per_q in chains]
    t0 = time.perf_counter()
    scores, extra = GSRChains(beams, top_n=3).score(split)
    per_q_ms = 1000 * (time.perf_counter() - t0) / n
    local = []
    for q in range(len(split)):
        e0, e1 = int(split.edge_ptr[q]), int(split.edge_ptr[q + 1])
        local.append(torch.nonzero(torch.isfinite(scores[e0:e1])).flatten().tolist())
    topics = []
    for q in range(len(split)):
        n0, n1 = int(split.ent_ptr[q]), int(split.ent_ptr[q + 1])
        names = [index.entities[e] for e in split.entity_ids[n0:n1][split.topic_mask[n0:n1]].tolist()]
        topics.append(np.array([store.entities.get(n) for n in names if store.entities.get(n) is not None]))
    named = [[([index.relations[r] for r in c], s) for c, s in per_q] for per_q in beams]
    whole = gsr_store_retrieve(store, topics, named, top_n=3)
    rows = []
    for form, triples, ms, valid in (
        ("per question", per_question_names(split, local, index), per_q_ms, extra["valid@3"]),
        (
            "whole KG",
            [store_names(store, e) for e in whole.edges],
            1000 * float(np.mean(whole.seconds[:n])),
            whole.summary(3)["valid@3"],
        ),
    ):
        figures = answer_figures(split.answers[:n], [entities_of(t) for t in triples[:n]])
        rows.append(
            {
                "method": "GSR (gold chains, top 3)",
                "form": form,
                **figures,
                "triples": round(float(np.mean([len(t) for t in triples[:n]])), 1),
                "ms_per_question": round(ms, 2),
                "valid@3": round(float(valid), 4),
            }
        )
    return rows


def real_vector_rows(vectors, queries: int = 200) -> list[dict]:
    """The approximate index on real vectors (MiniLM of the store's names) against the exact one."""
    from gsr_train.text.vector_index import VectorIndex, VectorIndexOptions

    emb, rows = vectors.emb.entity, vectors.entities.rows
    rng = np.random.default_rng(0)
    q = emb[torch.from_numpy(rows[rng.choice(rows.size, min(queries, rows.size), replace=False)])].float()
    exact = vectors.entities.search(q, 16)[0]
    out = []
    for nprobe in (16, 64, 128):
        index = VectorIndex(emb, rows, VectorIndexOptions(exact_below=0, nprobe=nprobe))
        t0 = time.perf_counter()
        found = index.search(q, 16)[0]
        ms = 1000 * (time.perf_counter() - t0) / q.shape[0]
        recall = np.mean([len(set(a) & set(b)) / 16 for a, b in zip(found, exact)])
        out.append(
            {
                "rows": f"{rows.size} (webqsp_mini names)",
                "index": index.kind,
                "ms_per_query": round(ms, 3),
                "recall@16": round(float(recall), 4),
            }
        )
    return out


def webqsp_part(args, work: Path) -> tuple[list[dict], list[dict]]:
    from gsr_train.kg.index import get_index
    from gsr_train.kg.paths import get_supervision
    from gsr_train.kg.store import open_store
    from gsr_train.kg.store_build import import_kg
    from gsr_train.patterns.sources import gold_patterns
    from gsr_train.text.embeddings import get_embeddings
    from gsr_train.text.encoders import load_encoder
    from gsr_train.text.store_embeddings import StoreVectors

    import_kg([union_tsv(Path(args.data), work / "kg.tsv")], work / "store", overwrite=True)
    store = open_store(work / "store")
    index = get_index(args.data, splits=["train", "validation", "test"])
    emb = get_embeddings(index, "minilm", splits=["test"])
    split_name = "test"
    chains = get_supervision(index, split_name).chains_filtered
    n = len(index[split_name]) if args.limit is None else min(args.limit, len(index[split_name]))
    patterns = gold_patterns(index, split_name, chains)
    from gsr_train.config import default_cache_dir

    cache = default_cache_dir()
    vectors = StoreVectors.build(store, load_encoder("minilm"), cache)
    patterns = [p if q < n else [] for q, p in enumerate(patterns)]
    rows = simgrag_rows(index, split_name, emb, vectors, patterns, cache, n)
    rows += gsr_rows(index, split_name, store, [c if q < n else [] for q, c in enumerate(chains)], n)
    for r in rows:
        r["questions"] = n
    return rows, real_vector_rows(vectors)


def index_part(sizes: list[int], dim: int = 384, queries: int = 50) -> list[dict]:
    from gsr_train.text.vector_index import VectorIndex, VectorIndexOptions

    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        centres = rng.standard_normal((3000, dim)).astype(np.float32)
        x = centres[rng.integers(0, 3000, n)] + 0.6 * rng.standard_normal((n, dim), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        table = torch.from_numpy(x)
        q = table[torch.from_numpy(rng.integers(0, n, queries))] + 0.01
        found = {}
        for kind, options in (
            ("exact", VectorIndexOptions(exact_below=n)),
            ("approximate", VectorIndexOptions(exact_below=0)),
        ):
            t0 = time.perf_counter()
            index = VectorIndex(table, None, options)
            build = time.perf_counter() - t0
            t0 = time.perf_counter()
            found[kind] = [index.search(q[i : i + 1], 16)[0][0] for i in range(queries)]
            ms = 1000 * (time.perf_counter() - t0) / queries
            rows.append({"rows": n, "index": index.kind, "build_s": round(build, 2), "ms_per_query": round(ms, 3)})
            del index
        recall = np.mean([len(set(a) & set(b)) / 16 for a, b in zip(found["exact"], found["approximate"])])
        rows[-1]["recall@16"] = round(float(recall), 4)
        rows[-1]["peak_rss_mb"] = round(peak_rss_mb(), 1)
    return rows


def table(title: str, rows: list[dict]) -> Table:
    t = Table(title=title)
    cols = list(dict.fromkeys(k for r in rows for k in r))
    for c in cols:
        t.add_column(c)
    for r in rows:
        t.add_row(*[str(r.get(c, "")) for c in cols])
    return t


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--limit", type=int, default=None, help="the first N test questions")
    ap.add_argument("--sizes", default="100000,1000000", help="vector index sizes (comma separated; 0: none)")
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "bench_whole_kg.json"))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        retrieval, real_rows = webqsp_part(args, work)
    sizes = [int(s) for s in args.sizes.split(",") if int(s) > 0]
    index_rows = real_rows + (index_part(sizes) if sizes else [])
    console = Console(width=160)
    console.print(table("whole KG beside per question (webqsp_mini test)", retrieval))
    if index_rows:
        console.print(table("vector index: exact (flat) vs approximate (IVF, fp16)", index_rows))
    doc = {"retrieval": retrieval, "vector_index": index_rows, "threads": 1}
    save_figures(args.out, doc)
    return doc


if __name__ == "__main__":
    main()
