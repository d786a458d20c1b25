"""Real-size data: generated RoG corpora of 1M, 20M and 100M triple rows through the whole pipeline.

Every stage runs in its own process, so each gets its own wall time and peak RSS:

* ``generate``: a deterministic RoG-format parquet corpus (:mod:`gsr_train.data.rog_corpus`),
  4,300 triples per question in hub-style shards, with WebQSP's split proportions below 50M
  rows and CWQ's (27,639 / 3,519 / 3,531) from 50M up; reused when present;
* ``build``: the streaming, memory-mapped KG index; ``build (in-memory)``: the previous
  builder (every row as Python objects first) where it fits in RAM, for the ratio;
* ``open``: opening the cached index (sizes + checksums), what every run pays;
* ``prepare``: hashing-encoder embeddings and shortest-path supervision of every split;
* ``train + retrieve``: ``train.py +experiment=subgraphrag_quickstart`` for one epoch with
  warm caches (training, test-split scoring of all triples, results file, metrics);
* ``DDP x2``: the same run with ``trainer=ddp_cpu`` (two ``ddp_spawn`` ranks). The table
  gives every process's unique memory (USS: private pages) at the moment the whole tree
  used most, against the single-process run's: with the index and embeddings memory-mapped,
  a second rank adds little more than its own model and batches.
* ``GNN-RAG``: ``train.py +experiment=gnnrag_webqsp_mini`` on the same corpus for one epoch (up to
  ``--gnn-max-rows``): the node scorer's batches, message passing and shortest-path evidence at size;

    .venv/bin/python bench/bench_scale.py [--rows 1M,20M,100M] [--work /tmp/gsr_scale] [--trainer gpu]

``--trainer gpu``: the training runs with ``trainer=gpu`` (every stage of them on CUDA; the CPU DDP
stage is left out); the table says which device trained.

Corpora, caches and run folders live under ``--work`` (several GB at 100M). Writes the
table and ``bench/results/bench_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
SPLITS = ["train", "validation", "test"]


def parse_rows(text: str) -> int:
    raw = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(raw[-1:], 1)
    return int(float(raw[:-1] if scale > 1 else raw) * scale)


def label(rows: int) -> str:
    return f"{rows // 1_000_000}M" if rows >= 1_000_000 else f"{rows // 1000}k"


# ----------------------------------------------------------------------------- process memory
def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _tree(pid: int) -> list[int]:
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += _children(p)
    return seen


def _rollup(pid: int) -> dict[str, int] | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            fields = dict(line.split(":", 1) for line in f.read().splitlines()[1:] if ":" in line)
    except OSError:
        return None
    kb = {k: int(v.split()[0]) for k, v in fields.items()}
    return {
        "rss": kb.get("Rss", 0),
        "pss": kb.get("Pss", 0),
        "uss": kb.get("Private_Clean", 0) + kb.get("Private_Dirty", 0),
        "anon": kb.get("Anonymous", 0),
    }


class TreeSampler:
    """Samples the unique memory (USS) of a process and its descendants; keeps the sample
    with the highest total and every process's own peak."""

    def __init__(self, pid: int, every: float = 0.25) -> None:
        self.pid, self.every = pid, every
        self.best_total = 0
        self.best: dict[int, dict] = {}
        self.peaks: dict[int, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            sample = {p: r for p in _tree(self.pid) if (r := _rollup(p)) is not None}
            total = sum(r["uss"] for r in sample.values())
            if total > self.best_total:
                self.best_total, self.best = total, sample
            for p, r in sample.items():
                old = self.peaks.get(p)
                self.peaks[p] = r if old is None or r["uss"] > old["uss"] else old
            self._stop.wait(self.every)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        mb = lambda kb: round(kb / 1024, 1)  # noqa: E731
        return {
            "total_uss_mb": mb(self.best_total),
            "processes_at_peak": [{k: mb(v) for k, v in r.items()} for r in self.best.values()],
            "process_peaks": [{k: mb(v) for k, v in r.items()} for r in self.peaks.values()],
        }


def run_stage(cmd: list[str], env: dict | None = None, log: Path | None = None, sample: bool = False) -> dict:
    """Run ``cmd``; its wall time, its peak RSS (``wait4``), exit code, last output lines."""
    env = {**os.environ, **(env or {})}
    out = open(log, "w") if log else subprocess.DEVNULL
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    sampler = TreeSampler(proc.pid) if sample else None
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - t0
    if log:
        out.close()
    result = {
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "returncode": proc.returncode,
    }
    if sampler:
        result["memory"] = sampler.stop()
    if proc.returncode != 0:
        tail = log.read_text().splitlines()[-15:] if log else []
        raise RuntimeError(f"stage failed ({proc.returncode}): {' '.join(cmd)}\n" + "\n".join(tail))
    return result


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"


def py(code: str) -> list[str]:
    return [PY, "-c", code]


# ----------------------------------------------------------------------------- stages
def shape_of(rows: int) -> str:
    return "cwq" if rows >= 50_000_000 else "webqsp"


def stages_for(rows: int, work: Path, args) -> dict:
    name, shape = label(rows), shape_of(rows)
    corpus, cache, logs = work / f"{shape}{name}", work / f"cache-{shape}{name}", work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    data = corpus / "data"
    env = {
        "GSR_TRAIN_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])),
    }
    res: dict = {"rows_requested": rows, "shape": shape}
    console = Console(stderr=True)

    console.log(f"[{name}] generate")
    res["generate"] = run_stage(
        py(
            "import json; from gsr_train.data.rog_corpus import CorpusSpec, write_corpus; "
            f"s = write_corpus(CorpusSpec.from_rows({rows}, shape={shape!r}), {str(corpus)!r}); print(json.dumps(s))"
        ),
        env,
        logs / f"{name}-generate.log",
    )
    spec = json.loads((corpus / "corpus.json").read_text())
    res["corpus"] = {
        "questions": spec["questions"],
        "triples": spec["triples"],
        "parquet_mb": round(sum(p.stat().st_size for p in data.iterdir()) / 2**20, 1),
    }

    console.log(f"[{name}] build (streaming)")
    shutil.rmtree(cache, ignore_errors=True)  # every stage below starts cold: index, embeddings, supervision
    res["build"] = run_stage(
        py(f"from gsr_train.kg.index import get_index; get_index({str(data)!r}, {SPLITS!r}, skip_invalid=True)"),
        env,
        logs / f"{name}-build.log",
    )
    folder = next(p for p in (cache / "kg_index").iterdir() if not p.name.startswith("."))
    meta = json.loads((folder / "meta.json").read_text())
    res["index"] = {
        "entities": meta["num_entities"],
        "relations": meta["num_relations"],
        "mb_on_disk": round(sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20, 1),
        "triples": sum(meta["triples"].values()),
    }

    if rows <= args.old_max_rows:
        console.log(f"[{name}] build (in-memory reference)")
        res["build_in_memory"] = run_stage(
            py(
                "from tests.oracles.index_reference import build_index_in_memory; "
                f"build_index_in_memory({str(data)!r}, {SPLITS!r}, skip_invalid=True)"
            ),
            env,
            logs / f"{name}-build-old.log",
        )
    else:
        res["build_in_memory"] = {"skipped": f"needs about {0.3 * rows / 1e6:.0f} GB (0.3 GB per million rows)"}

    console.log(f"[{name}] open")
    res["open"] = run_stage(
        py(
            "import time, torch; t = time.perf_counter(); from gsr_train.kg.index import get_index; "
            f"i = get_index({str(data)!r}, {SPLITS!r}, skip_invalid=True); "
            "print('open', time.perf_counter() - t)"
        ),
        env,
        logs / f"{name}-open.log",
    )
    opened = [ln for ln in (logs / f"{name}-open.log").read_text().splitlines() if ln.startswith("open ")]
    res["open"]["in_process_seconds"] = round(float(opened[-1].split()[1]), 3) if opened else None
    res["import_only"] = run_stage(py("import torch, gsr_train.kg.index"), env)

    console.log(f"[{name}] prepare (embeddings + supervision)")
    res["prepare"] = run_stage(
        py(
            "from gsr_train.kg.index import get_index; from gsr_train.text.embeddings import get_embeddings; "
            "from gsr_train.kg.paths import get_supervision; "
            f"i = get_index({str(data)!r}, {SPLITS!r}, skip_invalid=True); get_embeddings(i, 'hashing'); "
            f"[get_supervision(i, s) for s in {SPLITS!r}]"
        ),
        env,
        logs / f"{name}-prepare.log",
    )

    def train(tag: str, *extra: str, experiment: str = "subgraphrag_quickstart") -> dict:
        run_dir = work / "runs" / f"{name}-{tag}"
        shutil.rmtree(run_dir, ignore_errors=True)
        epochs = "retriever.train.epochs=1" if experiment.startswith("gnnrag") else "model.train.epochs=1"
        out = run_stage(
            [
                PY,
                "train.py",
                f"+experiment={experiment}",
                f"data.dir={data}",
                f"data.name={shape}{name}",
                "data.skip_invalid=true",
                "encoder.name=hashing",
                epochs,
                f"trainer={args.trainer}",
                "trainer.enable_progress_bar=false",
                f"hydra.run.dir={run_dir}",
                *extra,
            ],
            env,
            logs / f"{name}-{tag}.log",
            sample=True,
        )
        figures = json.loads((run_dir / "metrics.json").read_text())
        training = figures.get("training") or {}
        scoring = (figures.get("extra") or {}).get("score_seconds", 0)  # a +experiment=retrieve run
        out["timings"] = figures.get("timings") or {"train_s": training.get("train_s", 0), "retrieve_s": scoring}
        out["at_k"] = figures.get("at_k") or figures.get("metrics")
        out["training"] = {k: v for k, v in training.items() if k != "skipped"}
        return out

    console.log(f"[{name}] train + retrieve")
    res["train"] = train("single")
    if rows <= args.ddp_max_rows and args.trainer == "cpu":
        console.log(f"[{name}] DDP x2 (ddp_spawn)")
        res["ddp"] = train("ddp", "trainer=ddp_cpu")
    if rows <= args.gnn_max_rows:
        console.log(f"[{name}] GNN-RAG: train + retrieve")
        # one GNN, as measured before the shipped recipe became a three-member ensemble (3x the time)
        res["gnn"] = train("gnn", "retriever.options.members=1", experiment="gnnrag_webqsp_mini")
    return res


def table(results: dict, where: str) -> Table:
    t = Table(title=f"real-size pipeline (generated RoG-format corpora; {where})")
    for col in ("corpus", "stage", "seconds", "peak RSS GB", "notes"):
        t.add_column(col, justify="left" if col in ("corpus", "stage", "notes") else "right")
    gb = lambda mb: f"{mb / 1024:.2f}"  # noqa: E731
    for name, r in results.items():
        c = r["corpus"]
        first = (
            f"{name} ({r['shape']}-shaped): {c['questions']:,} q, {c['triples'] / 1e6:.1f}M rows, "
            f"{c['parquet_mb']:.0f} MB parquet"
        )
        rows = [("generate", r["generate"], "")]
        idx = r["index"]
        rows.append(
            ("build (streaming)", r["build"], f"{idx['entities']:,} entities, {idx['mb_on_disk']:.0f} MB on disk")
        )
        old = r["build_in_memory"]
        if "skipped" in old:
            t_rows_old = ("build (in-memory, before)", None, old["skipped"])
        else:
            ratio = old["seconds"] / r["build"]["seconds"]
            mem = old["peak_rss_mb"] / r["build"]["peak_rss_mb"]
            t_rows_old = ("build (in-memory, before)", old, f"streaming: {ratio:.1f}x faster, {mem:.1f}x less memory")
        rows.append(t_rows_old)
        rows.append(
            (
                "open cached index",
                r["open"],
                f"{r['open']['in_process_seconds']:.2f}s after imports; "
                f"imports alone: {gb(r['import_only']['peak_rss_mb'])} GB",
            )
        )
        rows.append(("prepare (emb. + supervision)", r["prepare"], "hashing encoder"))
        tr = r["train"]
        rows.append(
            (
                "1 epoch + test retrieval",
                tr,
                f"train {tr['timings'].get('train_s', 0):.0f}s, retrieve {tr['timings'].get('retrieve_s', 0):.0f}s; "
                f"USS {tr['memory']['total_uss_mb'] / 1024:.2f} GB",
            )
        )
        if "ddp" in r:
            d = r["ddp"]
            per = ", ".join(f"{p['uss'] / 1024:.2f}" for p in d["memory"]["processes_at_peak"])
            extra = (d["memory"]["total_uss_mb"] - tr["memory"]["total_uss_mb"]) / 1024
            rows.append(("same, DDP x2 (ddp_spawn)", d, f"USS per process {per} GB; +{extra:.2f} GB over 1 process"))
        if "gnn" in r:
            g = r["gnn"]
            rows.append(
                (
                    "GNN-RAG: 1 epoch + test retrieval",
                    g,
                    f"train {g['timings'].get('train_s', 0):.0f}s, retrieve {g['timings'].get('retrieve_s', 0):.0f}s; "
                    f"USS {g['memory']['total_uss_mb'] / 1024:.2f} GB",
                )
            )
        for i, (stage, s, note) in enumerate(rows):
            t.add_row(
                first if i == 0 else "",
                stage,
                "-" if s is None else f"{s['seconds']:.1f}",
                "-" if s is None else gb(s["peak_rss_mb"]),
                note,
            )
    return t


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1M,20M,100M", help="corpus sizes in triple rows, comma separated")
    parser.add_argument(
        "--work",
        default=os.environ.get("GSR_SCALE_DIR", "/tmp/gsr_scale"),
        help="folder for corpora, caches and runs (several GB)",
    )
    parser.add_argument(
        "--old-max-rows",
        type=parse_rows,
        default=parse_rows("25M"),
        help="run the in-memory builder up to this size (it needs ~0.3 GB per million rows)",
    )
    parser.add_argument(
        "--ddp-max-rows", type=parse_rows, default=parse_rows("25M"), help="run the two-rank DDP stage up to this size"
    )
    parser.add_argument(
        "--gnn-max-rows",
        type=parse_rows,
        default=parse_rows("25M"),
        help="train and score the GNN-RAG retriever for one epoch up to this size",
    )
    parser.add_argument("--trainer", default="cpu", choices=["cpu", "gpu"], help="the trainer of the training runs")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "bench_scale.json"))
    args = parser.parse_args(argv)
    sizes = [parse_rows(s) for s in args.rows.split(",") if s]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(work).free / 2**30
    need = sum(s / 1e6 * 0.15 for s in sizes)  # parquet + index + caches, measured ~0.12 GB per M rows
    if free < need:
        raise SystemExit(f"{work}: {free:.0f} GB free, the corpora and caches need about {need:.0f} GB")

    results = {label(s): stages_for(s, work, args) for s in sizes}
    where = f"{os.cpu_count()} CPU cores, training on " + (gpu_name() if args.trainer == "gpu" else "the CPU")
    Console(width=200).print(table(results, where))
    from gsr_train.io import write_json

    doc = {"bench": "scale", "cpus": os.cpu_count(), "trainer": args.trainer, "where": where, "results": results}
    write_json(args.out, doc)
    print(f"figures written to {args.out}")
    return results


if __name__ == "__main__":
    main()
