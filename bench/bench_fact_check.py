"""Fact checking against the KG at real size: calibration facts, graph verbalisation and the lexical
first stage on any RoG folder, e.g. a generated 20M-row corpus.

    .venv/bin/python bench/bench_fact_check.py --generate 20M --work /tmp/factcheck   # generate, build, measure
    .venv/bin/python bench/bench_fact_check.py --data ../shared/data/webqsp_mini --questions 232

Stages (the generation and the index build run in child processes, so the figures are this one's):
calibration facts over every graph of the split (one true fact per graph and its two perturbed
copies); the first ``--questions`` graphs verbalised as knowledge lines; each fact's closest lines
by the vectorised lexical stage (:class:`gsr_train.eval.fact_check.Knowledge`) against a per-line
set-intersection loop, the slower way, same lines (the ratio is measured in this run). Prints a
table with seconds and peak RSS and writes bench/results/bench_fact_check.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))


def _rows(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("KM")) * scale)


def _child(code: str) -> float:
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return time.perf_counter() - t0


def _loop_closest(fact: str, lines: list[str], n: int) -> list[str]:
    """The slower way: one set intersection per line."""
    import numpy as np

    from gsr_train.eval.fact_check import _words

    if len(lines) <= n:
        return list(lines)
    words = _words(fact)
    overlap = np.asarray([len(words & _words(line)) for line in lines])
    return [lines[i] for i in np.argsort(-overlap, kind="stable")[:n]]


def main() -> None:
    from benchutil import peak_rss_mb, save_figures

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="a RoG folder (default: the generated one under --work)")
    ap.add_argument("--generate", default=None, help="generate a corpus of this many triple rows (20M, 100M)")
    ap.add_argument("--work", default="/tmp/bench_fact_check")
    ap.add_argument("--split", default="test")
    ap.add_argument("--questions", type=int, default=200, help="graphs verbalised and matched")
    ap.add_argument("--candidates", type=int, default=32)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "bench_fact_check.json"))
    a = ap.parse_args()
    work, figures = Path(a.work), {}
    data = Path(a.data) if a.data else work / "data"
    if a.generate:
        figures["generate_s"] = round(
            _child(
                "from gsr_train.data.rog_corpus import CorpusSpec, write_corpus; "
                f"write_corpus(CorpusSpec.from_rows({_rows(a.generate)}), {str(work)!r})"
            ),
            1,
        )
    cache = work / "cache"
    figures["build_s"] = round(
        _child(
            "from gsr_train.kg.index import get_index; "
            f"get_index({str(data)!r}, ({a.split!r},), {str(cache)!r}, skip_invalid=True)"
        ),
        1,
    )

    from gsr_train.eval.fact_check import Knowledge, calibration_facts, graph_lines
    from gsr_train.kg.index import get_index

    index = get_index(str(data), (a.split,), cache, skip_invalid=True)
    split = index[a.split]
    rows = []

    def stage(name: str, fn):
        t0 = time.perf_counter()
        out = fn()
        rows.append({"stage": name, "seconds": round(time.perf_counter() - t0, 2), "peak_rss_mb": peak_rss_mb()})
        return out

    facts = stage(
        f"calibration facts ({len(split)} graphs)", lambda: calibration_facts(split, index.entities, index.relations, 1)
    )
    n = min(a.questions, len(split))
    lines = stage(
        f"verbalise {n} graphs", lambda: [graph_lines(split, q, index.entities, index.relations) for q in range(n)]
    )
    mine = [f for f in facts if f.question < n]
    knowledge = [Knowledge(x) for x in lines]
    fast = stage(
        f"lexical stage, vectorised ({len(mine)} facts)",
        lambda: [knowledge[f.question].closest(f.text, a.candidates) for f in mine],
    )
    slow = stage(
        f"lexical stage, per-line loop ({len(mine)} facts)",
        lambda: [_loop_closest(f.text, lines[f.question], a.candidates) for f in mine],
    )
    speedup = rows[-1]["seconds"] / max(rows[-2]["seconds"], 1e-9)
    spec = json.loads((work / "corpus.json").read_text()) if (work / "corpus.json").exists() else {}
    print(f"\n{data} [{a.split}]: {len(split)} graphs, {int(split.edge_ptr[-1])} edges; {len(facts)} calibration facts")
    print("| stage | seconds | peak RSS MB |\n|---|---:|---:|")
    for r in rows:
        print(f"| {r['stage']} | {r['seconds']} | {r['peak_rss_mb']} |")
    print(
        f"\nvectorised / loop: {speedup:.2f}x, same lines: {fast == slow}; generate {figures.get('generate_s')} s, "
        f"index build {figures['build_s']} s (child processes)"
    )
    save_figures(
        a.out,
        {
            "data": str(data),
            "corpus": spec,
            "split": a.split,
            "graphs": len(split),
            "edges": int(split.edge_ptr[-1]),
            "facts": len(facts),
            "rows": rows,
            "speedup_lexical": round(speedup, 2),
            "same_lines": fast == slow,
            **figures,
        },
    )


if __name__ == "__main__":
    main()
