"""The whole-KG store at real size: ``gsr-train import-kg`` of a generated TSV KG, opening the store,
and cutting 2-hop capped graphs (``data.kg``), beside the per-question KG index build.

A KG of ``--triples`` rows (default 100M) is generated once into ``--work`` (Freebase-like: a
zipf-distributed entity pool of ``triples / 8`` names, mostly ``m.`` ids, some hubs, 6,000
relations). Each stage runs in a process of its own, for its wall time and peak RSS (``wait4``):

* ``import``: ``gsr-train import-kg kg.tsv --out store`` from scratch;
* ``open``: :func:`~gsr_train.kg.store.open_store` plus one name lookup, what every run pays;
* ``extract``: 2-hop graphs capped at 5,000 triples for ``--questions`` topic entities drawn from the
  store (degree-weighted, so hubs come up as they do in questions): ms per question (median, p90,
  max) and triples per question.

The per-question KG index build of a corpus of the same size (``bench/bench_scale.py``) is read from
``bench/results/bench_scale.json`` for the table, not rerun.

    .venv/bin/python bench/bench_kg_store.py [--triples 100M] [--work /tmp/gsr_kg] [--questions 1000]

Writes the table and ``bench/results/bench_kg_store.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from bench_scale import label, parse_rows, run_stage
from benchutil import save_figures
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
CHUNK = 5_000_000


def generate(path: Path, triples: int, seed: int = 0) -> dict:
    """A TSV KG of ``triples`` rows, written in chunks (pyarrow's CSV writer, no quoting)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as csv

    rng = np.random.default_rng(seed)
    pool = max(triples // 8, 10)
    tmp = path.with_suffix(".partial")
    options = csv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    t0 = time.perf_counter()
    with csv.CSVWriter(
        str(tmp), pa.schema([("h", pa.string()), ("r", pa.string()), ("t", pa.string())]), write_options=options
    ) as out:
        for start in range(0, triples, CHUNK):
            n = min(CHUNK, triples - start)
            heads = (rng.zipf(1.3, n) - 1) % pool
            tails = (rng.zipf(1.2, n) - 1) % pool
            rels = (rng.zipf(1.5, n) - 1) % 6000

            def names(ids: np.ndarray) -> pa.Array:
                text = pc.cast(pa.array(ids), pa.string())
                return pc.if_else(
                    pa.array(ids % 5 == 0),
                    pc.binary_join_element_wise("Entity ", text, ""),
                    pc.binary_join_element_wise("m.0", text, ""),
                )

            rel = pc.binary_join_element_wise("domain.type.property_", pc.cast(pa.array(rels), pa.string()), "")
            out.write_table(pa.table({"h": names(heads), "r": rel, "t": names(tails)}))
    tmp.replace(path)
    return {"seconds": round(time.perf_counter() - t0, 1), "bytes": path.stat().st_size}


CHILD_OPEN = """
import json, sys, time
t0 = time.perf_counter()
from gsr_train.kg.store import open_store
t1 = time.perf_counter()
s = open_store(sys.argv[1]); found = s.entities_named("Entity 5")
t2 = time.perf_counter()
print(json.dumps({"package_import_s": round(t1 - t0, 3), "open_s": round(t2 - t1, 4), "found": int(found.size)}))
"""

CHILD_EXTRACT = """
import json, sys, time
import numpy as np
from gsr_train.kg.store import open_store
from gsr_train.kg.extract import ExtractOptions, Extractor
s = open_store(sys.argv[1]); n = int(sys.argv[2])
rng = np.random.default_rng(1)
topics = np.asarray(s.heads[rng.integers(0, s.num_triples, n)], dtype=np.int64)  # degree-weighted
ex = Extractor(s, ExtractOptions(hops=2, max_triples=5000))
ex.edges(topics[:1])  # compiled once
ms, sizes = [], []
for t in topics:
    t0 = time.perf_counter()
    e = ex.edges(np.array([t]))
    ms.append(1000 * (time.perf_counter() - t0))
    sizes.append(e.size)
figures = {"questions": n, "ms_median": float(np.median(ms)), "ms_p90": float(np.percentile(ms, 90)),
           "ms_max": float(np.max(ms)), "triples_mean": float(np.mean(sizes)),
           "capped_share": float(np.mean(np.asarray(sizes) == 5000))}
print(json.dumps({k: round(v, 3) for k, v in figures.items()}))
"""


CHILD_LINK = """
import json, resource, sys, time
import numpy as np
from gsr_train.kg.store import open_store
from gsr_train.kg.linking import EntityLinker
s = open_store(sys.argv[1]); n = int(sys.argv[2])
t0 = time.perf_counter(); linker = EntityLinker(s); index_s = time.perf_counter() - t0
rng = np.random.default_rng(2)
picks = np.asarray(s.heads[rng.integers(0, s.num_triples, 20 * n)], dtype=np.int64)  # degree-weighted
names = s.display_names(picks).to_pylist()
named = [(int(e), t) for e, t in zip(picks, names) if t.startswith("Entity ")][:n]
ms, hits = [], 0
for e, name in named:
    t0 = time.perf_counter()
    found = linker.link(f"where was {name.lower()} born", 5)
    ms.append(1000 * (time.perf_counter() - t0))
    hits += bool(found) and found[0][0] == e
figures = {"index_s": index_s, "questions": len(named), "recall@1": hits / max(len(named), 1),
           "ms_median": float(np.median(ms)), "ms_p90": float(np.percentile(ms, 90))}
print(json.dumps({k: round(v, 3) for k, v in figures.items()}))
"""


def child(code: str, *args: str, log: Path) -> tuple[dict, dict]:
    stage = run_stage([PY, "-c", code, *args], log=log)
    return stage, json.loads(log.read_text().strip().splitlines()[-1])


def index_build_figures(rows: int) -> dict | None:
    """bench_scale's per-question index build at this size, where it has one."""
    path = REPO / "bench" / "results" / "bench_scale.json"
    found = json.loads(path.read_text())["results"].get(label(rows)) if path.exists() else None
    return None if not found else {k: found["build"][k] for k in ("seconds", "peak_rss_mb")}


def print_table(
    meta: dict, made: dict, stages: dict, opened: dict, cut: dict, linked: dict, index: dict | None
) -> None:
    size = f"{meta['triples']:,} triples ({made['bytes'] / 1e9:.1f} GB TSV), {meta['entities']:,} entities"
    table = Table(title=f"whole-KG store, {size}")
    for column in ("stage", "wall s", "peak RSS MB", "what"):
        table.add_column(column)
    what = {
        "import": f"{meta['triples'] / stages['import']['seconds'] / 1e6:.2f}M triples/s",
        "open": f"open_store + a lookup {opened['open_s']} s (the package's import {opened['package_import_s']} s)",
        "extract": f"{cut['ms_median']} ms median, {cut['ms_p90']} p90, {cut['ms_max']} max; "
        f"{cut['triples_mean']} triples, {cut['capped_share']:.0%} capped",
        "link": f"linker index {linked['index_s']} s; {linked['ms_median']} ms median, {linked['ms_p90']} p90 a "
        f"question; topic recall@1 {linked['recall@1']}",
    }
    for name, text in what.items():
        table.add_row(name, str(stages[name]["seconds"]), str(stages[name]["peak_rss_mb"]), text)
    if index:
        table.add_row(
            "index build (bench_scale)", str(index["seconds"]), str(index["peak_rss_mb"]), "per-question index"
        )
    Console().print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--triples", default="100M")
    ap.add_argument("--work", type=Path, default=Path("/tmp/gsr_kg"))
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "bench_kg_store.json")
    ap.add_argument("--generate", type=Path, help=argparse.SUPPRESS)  # the child that writes the KG file
    args = ap.parse_args()
    if args.generate:
        print(generate(args.generate, parse_rows(args.triples)))
        return
    rows = parse_rows(args.triples)
    work = args.work / label(rows)
    work.mkdir(parents=True, exist_ok=True)
    kg, store = work / "kg.tsv", work / "store"
    made: dict = {"seconds": None}
    if not kg.exists():  # in a child: a big parent's pages would count in every later stage's peak RSS
        made = run_stage([PY, __file__, "--generate", str(kg), "--triples", str(rows)], log=work / "generate.log")
    made["bytes"] = kg.stat().st_size
    import shutil

    shutil.rmtree(store, ignore_errors=True)
    stages = {
        "import": run_stage(
            [str(Path(PY).parent / "gsr-train"), "import-kg", str(kg), "--out", str(store)], log=work / "import.log"
        )
    }
    meta = json.loads((store / "meta.json").read_text())
    stages["open"], opened = child(CHILD_OPEN, str(store), log=work / "open.log")
    stages["extract"], cut = child(CHILD_EXTRACT, str(store), str(args.questions), log=work / "extract.log")
    stages["link"], linked = child(CHILD_LINK, str(store), str(args.questions), log=work / "link.log")
    index = index_build_figures(rows)
    print_table(meta, made, stages, opened, cut, linked, index)
    save_figures(
        args.out,
        {
            "triples": meta["triples"],
            "entities": meta["entities"],
            "relations": meta["relations"],
            "tsv_bytes": made["bytes"],
            "generate_s": made["seconds"],
            "stages": stages,
            "open": opened,
            "extract": cut,
            "link": linked,
            "index_build_bench_scale": index,
        },
    )


if __name__ == "__main__":
    main()
