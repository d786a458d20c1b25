"""OKGQA-P building blocks on the real webqsp_mini test graphs: vectorised vs. straightforward.

1. SC2D / SD2 profiles (per-relation clustering coefficients and degrees of every entity):
   :func:`gsr_train.robustness.similarity.relation_profiles` (one batched degree-ordered
   triangle count over all (question, relation) subgraphs) against a per-question,
   per-relation ``networkx.clustering`` loop, on the first ``--questions`` graphs, original
   and rewired at level 0.4. Values must agree within 1e-9.
2. Edge rewiring: the vectorised rejection sampler against a per-edge loop that builds each
   head's 1-hop neighbourhood and picks a random entity outside it (same question subset).
3. Wall time of every perturbation at level 0.6 on the whole test split (277k edges).

    .venv/bin/python bench/bench_robustness.py [--data DIR] [--questions 40] [--threads 1]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import networkx as nx
import torch
from benchutil import best_time
from rich.console import Console
from rich.table import Table

from gsr_train.io import write_json
from gsr_train.kg.index import default_cache_dir, get_index
from gsr_train.robustness.kge import get_scorer
from gsr_train.robustness.perturb import METHODS, perturb
from gsr_train.robustness.similarity import relation_profiles

REPO = Path(__file__).resolve().parents[1]


def profiles_loop(split) -> tuple[torch.Tensor, torch.Tensor]:
    c_all, d_all = [], []
    for q in range(len(split)):
        g = split.graph(q)
        n = g.num_entities
        rels = sorted(set(g.edge_rel.tolist()))
        c = [0.0] * n
        d = [0.0] * n
        for r in rels:
            sub = nx.Graph()
            sub.add_nodes_from(range(n))
            pairs = g.edge_index[:, g.edge_rel == r].T.tolist()
            sub.add_edges_from((h, t) for h, t in pairs if h != t)
            for i, v in nx.clustering(sub).items():
                c[i] += v
            for h, t in pairs:
                d[h] += 1
                d[t] += 1
        k = max(len(rels), 1) if rels else None
        c_all += [x / k if k else 0.0 for x in c]
        d_all += [x / k if k else 0.0 for x in d]
    return torch.tensor(c_all, dtype=torch.float64), torch.tensor(d_all, dtype=torch.float64)


def rewire_loop(split, chosen: torch.Tensor, seed: int) -> torch.Tensor:
    rng = random.Random(seed)
    tails = split.edge_index[1].clone()
    q_of = split.edge_question()
    for e in chosen.nonzero().flatten().tolist():
        q = int(q_of[e])
        e0, e1 = int(split.edge_ptr[q]), int(split.edge_ptr[q + 1])
        h = int(split.edge_index[0, e])
        ei = split.edge_index[:, e0:e1]
        near = set(ei[1, ei[0] == h].tolist()) | set(ei[0, ei[1] == h].tolist()) | {h}
        free = [x for x in range(int(split.num_entities[q])) if x not in near]
        if free:
            tails[e] = rng.choice(free)
    return tails


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "webqsp_mini"))
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "bench_robustness.json"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    index = get_index(a.data, ("train", "validation", "test"), default_cache_dir())
    full = index["test"]
    split = full.subset(range(min(a.questions, len(full))))
    rows = []
    for name, graphs in (("original", split), ("rewired 0.4", perturb(split, "rewire", 0.4, seed=0).split)):
        t_vec, (c1, d1) = best_time(lambda: relation_profiles(graphs), a.repeat)
        t_loop, (c2, d2) = best_time(lambda: profiles_loop(graphs), 1)
        diff = max(float((c1 - c2).abs().max()), float((d1 - d2).abs().max()))
        assert diff < 1e-9, f"profiles differ by {diff}"
        rows.append(
            {
                "what": f"SC2D/SD2 profiles, {name}",
                "edges": int(graphs.edge_rel.numel()),
                "vectorised_s": t_vec,
                "loop_s": t_loop,
                "speedup": t_loop / t_vec,
                "max_abs_diff": diff,
            }
        )
    p = perturb(split, "rewire", 0.4, seed=0)
    t_vec, _ = best_time(lambda: perturb(split, "rewire", 0.4, seed=0), a.repeat)
    t_loop, tails = best_time(lambda: rewire_loop(split, p.touched, 0), 1)
    rows.append(
        {
            "what": "edge rewiring 0.4",
            "edges": int(split.edge_rel.numel()),
            "vectorised_s": t_vec,
            "loop_s": t_loop,
            "speedup": t_loop / t_vec,
            "max_abs_diff": None,
        }
    )
    scorer = get_scorer(full, len(index.relations), None, default_cache_dir())
    whole = []
    for m in METHODS:
        t, _ = best_time(lambda: perturb(full, m, 0.6, seed=0, scorer=scorer), 1)
        whole.append({"method": m, "level": 0.6, "edges": int(full.edge_rel.numel()), "seconds": t})
    table = Table(title=f"robustness building blocks ({a.questions} webqsp_mini test graphs, {a.threads} thread)")
    for c in ("what", "edges", "vectorised s", "loop s", "speed-up", "max |diff|"):
        table.add_column(c, justify="left" if c == "what" else "right")
    for r in rows:
        table.add_row(
            r["what"],
            str(r["edges"]),
            f"{r['vectorised_s']:.3f}",
            f"{r['loop_s']:.3f}",
            f"{r['speedup']:.1f}x",
            "-" if r["max_abs_diff"] is None else f"{r['max_abs_diff']:.1e}",
        )
    t2 = Table(title=f"perturbation wall time, whole test split ({whole[0]['edges']} edges), level 0.6")
    t2.add_column("method")
    t2.add_column("seconds", justify="right")
    for w in whole:
        t2.add_row(w["method"], f"{w['seconds']:.2f}")
    con = Console()
    con.print(table)
    con.print(t2)
    write_json(
        a.out,
        {
            "data": a.data,
            "questions": a.questions,
            "threads": a.threads,
            "comparisons": rows,
            "perturbation_wall_time": whole,
        },
    )
    con.print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
