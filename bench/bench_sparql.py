"""Question graphs cut from a local Virtuoso (``data.kg=URL``) beside the embedded store (``data.kg=DIR``).

A random KG of ``--triples`` rows (Freebase-like skew: zipf-distributed entities, 200 relations) is
written as N-Triples once, bulk-loaded into a fresh Virtuoso (``tests/virtuoso.py``: its own folder,
ini and free ports) and imported into a store. Then 2-hop graphs capped at 5,000 triples are cut for
the distinct topic entities of ``--questions`` edges drawn at random (heads: zipf-skewed, so repeats are
dropped) four ways: from the store, from the endpoint with an empty cache (cold: what the run has not
met yet goes to Virtuoso), the same as it was asked before (one query of two ``LIMIT`` subqueries an
entity, whatever its degree: the slower way, for the ratio) and again as a rerun would (each question's
graph read from the SQLite cache, where the first pass kept it). Cold, an entity's edges are counted first,
and only a hub's are asked with ``LIMIT``.
For each: ms a question (median, p90), questions a second, the share of graphs equal to the store's
and the questions where a hub's edges were cut at ``data.sparql.limit`` (the graphs differ there).

    .venv/bin/python bench/bench_sparql.py [--triples 200000] [--questions 200] [--before-questions N]

Needs ``virtuoso-t`` (Debian's virtuoso-opensource). Writes the table and
``bench/results/bench_sparql.json``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchutil import peak_rss_mb, save_figures
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))


RELATIONS = 200
WRITE_ROWS = 1 << 20  # N-Triples lines formatted and written at a time


def write_kg(path: Path, triples: int, seed: int = 0) -> int:
    """``triples`` random edges (heads zipf-skewed, as Freebase's), the distinct ones written in the order of
    their IRIs as strings; numpy throughout and written in blocks, so 100M rows fit a 24 GB machine (the
    Python tuples of every row, sorted at once, took 9.9 GB at 20M)."""
    rng = np.random.default_rng(seed)
    entities = max(triples // 6, 10)
    heads = (rng.zipf(1.6, triples) - 1) % entities
    tails = rng.integers(0, entities, triples)
    rels = rng.integers(0, RELATIONS, triples)
    keys = np.unique((heads * RELATIONS + rels) * entities + tails)  # distinct (head, relation, tail)
    del heads, tails, rels
    h, rt = np.divmod(keys, RELATIONS * entities)
    del keys
    r, t = np.divmod(rt, entities)
    del rt
    # as strings: "e10" < "e9"; numpy's bytes order is Python's (a prefix first)
    digits = f"S{len(str(entities - 1))}"
    order = np.lexsort((t.astype(digits), r.astype("S3"), h.astype(digits)))
    with open(path, "w") as f:
        for start in range(0, len(order), WRITE_ROWS):
            rows = order[start : start + WRITE_ROWS]
            f.writelines(
                f"<http://ex.org/e{a}> <http://ex.org/r{b}> <http://ex.org/e{c}> .\n"
                for a, b, c in zip(h[rows].tolist(), r[rows].tolist(), t[rows].tolist())
            )
    return len(order)


def timed_cuts(cut, topics: list[str]) -> tuple[list, list[float]]:
    graphs, ms = [], []
    for t in topics:
        t0 = time.perf_counter()
        graphs.append(cut(t))
        ms.append(1000 * (time.perf_counter() - t0))
    return graphs, ms


def subquery_extractor(client, options):
    """The extractor asking every entity's edges as before counts were asked first: `edges_query`, two
    ``ORDER BY ... LIMIT`` subqueries an entity and direction, 50 entities a query."""
    from gsr_train.kg.sparql import batched, edges_query
    from gsr_train.kg.sparql_extract import EntityEdges, SparqlExtractor

    class Subqueries(SparqlExtractor):
        def _fetch(self, entities: list[str]) -> None:
            o = self.client.options
            batches = {edges_query(b, o.limit): b for b in batched(entities, o.batch)}
            for query, cols in self.client.columns_iter(list(batches), keep=False):
                by_entity = {e: EntityEdges([], [], [], [], False) for e in batches[query]}
                uncounted = {(e, d): o.limit + 1 for e in batches[query] for d in (0, 1)}
                self._split_rows(cols, by_entity, uncounted)
                for e, edges in by_entity.items():
                    self._keep(e, edges)

    return Subqueries(client, options)


def row(way: str, ms: list[float], same: float | None = None, cut: int | None = None) -> dict:
    return {
        "way": way,
        "questions": len(ms),
        "ms_median": round(float(np.median(ms)), 2),
        "ms_p90": round(float(np.percentile(ms, 90)), 2),
        "questions_per_s": float(f"{1000 * len(ms) / sum(ms):.3g}"),  # 3 digits: the slower way is < 0.1 at 20M
        "same_graph_as_store": same,
        "questions_with_a_cut_hub": cut,
    }


def main() -> dict:
    from gsr_train.kg.extract import Extractor
    from gsr_train.kg.extract_options import ExtractOptions
    from gsr_train.kg.sparql import SparqlClient
    from gsr_train.kg.sparql_extract import SparqlExtractor
    from gsr_train.kg.sparql_options import SparqlOptions
    from gsr_train.kg.store import open_store
    from gsr_train.kg.store_build import import_kg
    from tests.virtuoso import start_virtuoso

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--triples", type=int, default=200_000)
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument(
        "--before-questions", type=int, default=0, help="ask the slower way only the first N topics (0: all of them)"
    )
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "bench_sparql.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "load").mkdir()
        n = write_kg(root / "load" / "kg.nt", args.triples)
        server = start_virtuoso(root / "server", root / "load")
        try:
            t0 = time.perf_counter()
            server.load(root / "load", "http://ex.org/kg")
            load_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            import_kg([root / "load" / "kg.nt"], root / "store")
            import_s = time.perf_counter() - t0
            store = open_store(root / "store")
            rng = np.random.default_rng(1)
            ids = np.unique(np.asarray(store.heads[rng.integers(0, store.num_triples, args.questions)], dtype=np.int64))
            topics = store.entities.take(ids)
            options = ExtractOptions()
            local = Extractor(store, options)

            def store_cut(t: str) -> set:
                e = local.edges(np.array([store.entities.get(t)]))
                h, r, tl = (np.asarray(a[e], dtype=np.int64) for a in (store.heads, store.rels, store.tails))
                return set(zip(store.entities.take(h), store.relations.take(r), store.entities.take(tl)))

            want, ms_store = timed_cuts(store_cut, topics)
            rows = [row("store (data.kg=DIR)", ms_store, None)]
            before = SparqlClient(server.endpoint, SparqlOptions(graph="http://ex.org/kg"), root / "cache_before")
            n_before = min(args.before_questions or len(topics), len(topics))
            old_way, new_way = "endpoint, cold, LIMIT subqueries (before)", "endpoint, cold (data.kg=URL)"
            ways = [
                (old_way, before, subquery_extractor, topics[:n_before]),
                (new_way, None, SparqlExtractor, topics),
                ("endpoint, cached (a rerun)", None, SparqlExtractor, topics),
            ]
            client = SparqlClient(server.endpoint, SparqlOptions(graph="http://ex.org/kg"), root / "cache")
            times = {}
            for way, asker, extractor, asked in ways:
                remote = extractor(asker or client, options)  # a rerun: the cache on disk, nothing in memory
                got, times[way] = timed_cuts(lambda t: remote.cut([t]), asked)
                same = float(np.mean([set(g.triples) == w for g, w in zip(got, want)]))
                rows.append(row(way, times[way], round(same, 3), sum(bool(g.hubs) for g in got)))
                print(rows[-1], flush=True)  # a real-size run takes long: each way as it is measured
            # the ratio over the topics both cold ways were asked (the first ``n_before``)
            speedup = sum(times[old_way]) / sum(times[new_way][:n_before])
            before.close()
            stats = {"queries": client.stats.queries, **client.stats.extra}
            client.close()
        finally:
            server.stop()
    title = f"2-hop graphs of {len(topics)} distinct topics ({args.questions} drawn), {n:,} triples"
    title += f" (Virtuoso loaded in {load_s:.1f} s, the store imported in {import_s:.1f} s)"
    table = Table(title=f"{title}; cold: {speedup:.1f}x the subqueries' rate (on {n_before} topics)")
    for c in rows[0]:
        table.add_column(c)
    for r in rows:
        table.add_row(*[str(v) for v in r.values()])
    Console(width=140).print(table)
    doc = {"triples": n, "questions": len(topics), "drawn": args.questions, "virtuoso_load_s": round(load_s, 2)}
    doc["store_import_s"] = round(import_s, 2)
    doc["rows"] = rows
    doc["cold_x_subqueries"], doc["before_questions"] = round(speedup, 2), n_before
    doc.update(queries=stats, peak_rss_mb=round(peak_rss_mb(), 1))
    save_figures(args.out, doc)
    return doc


if __name__ == "__main__":
    main()
