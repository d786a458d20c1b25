"""KG-constrained decoding's graph side at real size: hop distances and next-relation sets.

Opens (or builds) the KG index of a RoG-format folder, e.g. a generated 20M-row corpus from
``bench/bench_scale.py`` (``/tmp/gsr_scale/webqsp20M/data``) or ``../shared/data/webqsp_mini``,
and times, in one process, over every question of a split:

* ``distances``: :meth:`gsr_train.kg.execution.ChainExecutor.distances` (one frontier
  expansion over all of a question's edges per hop), against ``loop``: the same breadth-first
  search written the straightforward way (an adjacency dict per question, one entity at a time):
  the slower way, for the ratio;
* ``allowed``: :meth:`~gsr_train.kg.execution.ChainExecutor.allowed_relations` for the empty prefix
  and for every one-relation prefix the question allows (what the constrained decoder asks at hops
  1 and 2), plain and with ``shortest=True``: the price of the shortest-chain rule.

Peak RSS of the process comes next to the times. Writes the table and
``bench/results/bench_chain_execution.json``.

    .venv/bin/python bench/bench_chain_execution.py --data /tmp/gsr_scale/webqsp20M/data \\
        --cache /tmp/gsr_scale/cache-webqsp20M
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict, deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from benchutil import peak_rss_mb, save_figures  # noqa: E402


def loop_distances(head: list, tail: list, topics: list, num_nodes: int) -> list:
    """Hop distances by a breadth-first search over an adjacency dict, one entity at a time."""
    adj = defaultdict(list)
    for h, t in zip(head, tail):
        adj[h].append(t)
        adj[t].append(h)
    dist = [-1] * num_nodes
    queue = deque()
    for s in topics:
        dist[s] = 0
        queue.append(s)
    while queue:
        e = queue.popleft()
        for x in adj[e]:
            if dist[x] < 0:
                dist[x] = dist[e] + 1
                queue.append(x)
    return dist


def main(argv=None) -> dict:
    from rich.console import Console
    from rich.table import Table

    from gsr_train.kg.execution import ChainExecutor
    from gsr_train.kg.index import get_index

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "webqsp_mini"))
    parser.add_argument("--cache", default=None, help="cache folder of the KG index (default: the project cache)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--questions", type=int, default=None, help="first N questions only")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "bench_chain_execution.json"))
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    index = get_index(args.data, splits=(args.split,), cache_dir=args.cache)
    t_open = time.perf_counter() - t0
    split = index[args.split]
    n = min(len(split), args.questions or len(split))
    ex = ChainExecutor(split)
    graphs = [ex.graph(q) for q in range(n)]  # views into the mapped index, outside the timings
    edges = sum(int(g.head.numel()) for g in graphs)

    t0 = time.perf_counter()
    vec = [ex.distances(q) for q in range(n)]
    t_vec = time.perf_counter() - t0
    plain = [(g.head.tolist(), g.tail.tolist(), g.topic.nonzero().flatten().tolist(), g.num_nodes) for g in graphs]
    t0 = time.perf_counter()
    looped = [loop_distances(*p) for p in plain]
    t_loop = time.perf_counter() - t0
    agree = all(v.tolist() == lp for v, lp in zip(vec, looped))

    def allowed(shortest: bool) -> tuple[float, int]:
        ex.clear_cache()
        if shortest:
            for q in range(n):
                ex.distances(q)  # timed above; here only the next-relation sets
        asked = 0
        t = time.perf_counter()
        for q in range(n):
            first = ex.allowed_relations(q, (), shortest=shortest)
            asked += 1
            for r in first.tolist():
                ex.allowed_relations(q, (r,), shortest=shortest)
                asked += 1
        return time.perf_counter() - t, asked

    t_plain, asked_plain = allowed(False)
    t_short, asked_short = allowed(True)
    doc = {
        "bench": "chain_execution",
        "data": args.data,
        "split": args.split,
        "questions": n,
        "edges": edges,
        "open_s": round(t_open, 2),
        "distances": {
            "vectorised_s": round(t_vec, 3),
            "loop_s": round(t_loop, 3),
            "speedup": round(t_loop / max(t_vec, 1e-9), 1),
            "identical": agree,
        },
        "allowed_relations": {
            "plain_s": round(t_plain, 3),
            "plain_prefixes": asked_plain,
            "shortest_s": round(t_short, 3),
            "shortest_prefixes": asked_short,
            "shortest_over_plain_per_prefix": round((t_short / asked_short) / max(t_plain / asked_plain, 1e-12), 2),
        },
        "peak_rss_mb": peak_rss_mb(),
    }
    table = Table(title=f"Chain execution on {args.data} ({args.split}: {n:,} questions, {edges:,} edges)")
    for col in ("stage", "calls", "seconds", "note"):
        table.add_column(col, justify="left" if col in ("stage", "note") else "right")
    table.add_row("open index", "", f"{t_open:.2f}", "")
    table.add_row("distances (vectorised)", f"{n:,}", f"{t_vec:.3f}", f"identical to the loop: {agree}")
    table.add_row("distances (BFS loop)", f"{n:,}", f"{t_loop:.3f}", f"speed-up {doc['distances']['speedup']}x")
    table.add_row("allowed_relations (plain)", f"{asked_plain:,}", f"{t_plain:.3f}", "")
    table.add_row(
        "allowed_relations (shortest)",
        f"{asked_short:,}",
        f"{t_short:.3f}",
        f"{doc['allowed_relations']['shortest_over_plain_per_prefix']}x per prefix",
    )
    table.add_row("peak RSS MB", "", "", f"{doc['peak_rss_mb']}")
    Console().print(table)
    save_figures(args.out, doc)
    return doc


if __name__ == "__main__":
    main()
