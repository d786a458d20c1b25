"""GSR random walks (``gsr.walks``) at real size: the vectorised sampler against a walk-by-walk loop.

Opens (or builds) the KG index of a RoG-format folder, e.g. a generated 20M-row corpus from
``bench/bench_scale.py`` (``/tmp/gsr_scale/webqsp20M/data``) or ``../shared/data/webqsp_mini``,
and times, in one process:

* ``union graph``: the distinct-triple CSR of the training graphs (streamed chunk by chunk);
* ``sample_walks``: :func:`gsr_train.datamodules.gsr_walks.sample_walks` (all walks advance one hop
  per step; distinct walks by one ``unique``; names by one ``take``) on the union graph above;
* ``loop``: the same function written the straightforward way over the same CSR (one walk and one
  hop at a time, a dict of distinct walks, names per walk): the slower way, for the ratio of
  distinct walks per second.

Peak RSS of the process comes next to the times. Writes the table and ``bench/results/bench_walks.json``.

    .venv/bin/python bench/bench_walks.py --data /tmp/gsr_scale/webqsp20M/data --cache /tmp/gsr_scale/cache-webqsp20M
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from benchutil import peak_rss_mb, save_figures  # noqa: E402


def loop_walks(index, offsets, rel, tail, starts, count: int, min_hops: int, max_hops: int, seed: int) -> list:
    """``sample_walks`` written the straightforward way over the same CSR: ``2 * count`` walks drawn
    one at a time, one hop at a time, distinct ones kept in a dict, names looked up per walk."""
    from gsr_train.datamodules.gsr_walks import Walk

    rng = random.Random(seed)
    off, rl, tl = offsets.numpy(), rel.numpy(), tail.numpy()
    st = starts.numpy()
    walks: dict = {}
    for _ in range(2 * count):
        s0 = cur = int(st[rng.randrange(len(st))])
        length = rng.randint(min_hops, max_hops)
        chain, prev = [], -1
        for _h in range(length):
            lo, hi = int(off[cur]), int(off[cur + 1])
            if hi == lo:
                break
            pick = lo + int(rng.random() * (hi - lo))
            r = int(rl[pick])
            if r == prev:
                break
            chain.append(index.relations[r])
            prev, cur = r, int(tl[pick])
        if len(chain) >= min_hops:
            walks.setdefault(Walk(index.entities[s0], tuple(chain)), None)
            if len(walks) >= count:
                break
    return list(walks)


def main(argv=None) -> dict:
    from rich.console import Console
    from rich.table import Table

    from gsr_train.datamodules.gsr_chains import META_PREFIXES
    from gsr_train.datamodules.gsr_walks import _start_entities, sample_walks, union_graph
    from gsr_train.kg.index import get_index

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "webqsp_mini"))
    parser.add_argument("--cache", default=None, help="cache folder of the KG index (default: the project cache)")
    parser.add_argument("--split", default="train")
    parser.add_argument("--starts", default="named", choices=("named", "topics"))
    parser.add_argument("--walks", type=int, default=50_000)
    parser.add_argument("--loop-walks", type=int, default=50_000)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "bench_walks.json"))
    args = parser.parse_args(argv)
    splits = (args.split,)

    t0 = time.perf_counter()
    index = get_index(args.data, splits=splits, cache_dir=args.cache)
    t_open = time.perf_counter() - t0
    t0 = time.perf_counter()
    offsets, rel, tail = union_graph(index, splits, META_PREFIXES)
    t_union = time.perf_counter() - t0
    starts = _start_entities(index, splits, args.starts, (), offsets[1:] - offsets[:-1])
    index.entity_has_text()  # computed once per run (the indexing data's subjects need it too)
    t0 = time.perf_counter()
    walks = sample_walks(index, splits, count=args.walks, starts=args.starts, seed=0, graph=(offsets, rel, tail))
    t_vec = time.perf_counter() - t0
    t0 = time.perf_counter()
    looped = loop_walks(index, offsets, rel, tail, starts, args.loop_walks, 2, 4, 0)
    t_loop = time.perf_counter() - t0
    vec_rate = len(walks) / max(t_vec, 1e-9)
    loop_rate = len(looped) / t_loop
    doc = {
        "bench": "walks",
        "data": args.data,
        "split": args.split,
        "starts": args.starts,
        "questions": len(index[args.split]),
        "triple_rows": int(index[args.split].total_edges),
        "distinct_triples": int(len(rel)),
        "start_entities": int(len(starts)),
        "open_s": round(t_open, 2),
        "union_graph_s": round(t_union, 2),
        "vectorised": {
            "walks_asked": args.walks,
            "walks_kept": len(walks),
            "seconds": round(t_vec, 2),
            "walks_per_s": round(vec_rate),
        },
        "loop": {
            "walks_asked": args.loop_walks,
            "walks_kept": len(looped),
            "seconds": round(t_loop, 2),
            "walks_per_s": round(loop_rate),
        },
        "speedup": round(vec_rate / loop_rate, 1),
        "peak_rss_mb": peak_rss_mb(),
    }
    table = Table(title=f"GSR random walks on {args.data} ({args.split})")
    for col in ("stage", "walks", "seconds", "walks/s", "peak RSS MB"):
        table.add_column(col, justify="right" if col != "stage" else "left")
    table.add_row("open index", "", f"{t_open:.2f}", "", "")
    table.add_row(
        f"union graph ({doc['triple_rows']:,} rows -> {doc['distinct_triples']:,} triples)",
        "",
        f"{t_union:.2f}",
        "",
        "",
    )
    table.add_row("sample_walks (vectorised)", f"{len(walks):,}", f"{t_vec:.2f}", f"{vec_rate:,.0f}", "")
    table.add_row("loop (one walk, one hop at a time)", f"{len(looped):,}", f"{t_loop:.2f}", f"{loop_rate:,.0f}", "")
    table.add_row("speed-up", "", "", f"{doc['speedup']}x", f"{doc['peak_rss_mb']}")
    Console().print(table)
    save_figures(args.out, doc)
    return doc


if __name__ == "__main__":
    main()
