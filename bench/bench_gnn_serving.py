"""GNN-RAG serving at real size: test scoring with the reference path (before) and the current one
(after), next to SubgraphRAG's test scoring, on the same corpus and encoder.

    .venv/bin/python bench/bench_gnn_serving.py                   # the 20M-row corpus (generated into --work if absent)
    .venv/bin/python bench/bench_gnn_serving.py --data /tmp/gsr_scale/webqsp20M/data \\
        --gnn-checkpoint RUN/checkpoints/best-00.ckpt --subgraphrag-checkpoint RUN/checkpoints/best-00.ckpt
    .venv/bin/python bench/bench_gnn_serving.py --data ../shared/data/webqsp_mini --device cuda

What is timed is what the runners time: for GNN-RAG ``retrievers.edge_scorer.serve`` (the retrieve
runner's ``score_seconds``: scores, answer candidates, evidence paths and the rows' ``answers`` /
``paths``), before = the old path kept in ``tests/oracles/gnn_serving_reference.py``; for
SubgraphRAG ``SubgraphRAGRetriever.retrieve`` with the run's top K, batch and serving mode (its
runner's ``retrieve_s``: projections, scoring, the results file). Without checkpoints, one epoch of
each is trained first (``train.py``, as ``bench/bench_scale.py`` does; reused from ``--work/runs``).

Each measurement runs in its own process (index and embeddings opened from the cache, not timed),
so each has its own peak RSS and glibc memory policy; ``--repeat`` rounds alternate the three and
the fastest of each is reported (the machine is shared: the load average is recorded). The before /
after outputs are compared: scores (max abs difference), every question's triple ranking, the
answers, the paths and the counts. Prints a table and writes ``bench/results/bench_gnn_serving.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

DEFAULT_DATA = Path("/tmp/gsr_scale/webqsp20M/data")
STAGES = ("gnn_before", "gnn_after", "subgraphrag")
MARK = "BENCH_STAGE "


def _rows(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("KM")) * scale)


def _env(args) -> dict:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "GSR_TRAIN_CACHE": str(args.cache),
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
    }


def _data_overrides(args) -> list[str]:
    """The data and encoder options every run and stage shares (so they share the cached index)."""
    return [
        f"data.dir={args.data}",
        f"data.name={args.data_name}",
        "data.skip_invalid=true",
        f"encoder.name={args.encoder}",
    ]


def _compose(args, experiment: str):
    from hydra import compose, initialize_config_dir

    from gsr_train.config import register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(
            config_name="config",
            overrides=[f"+experiment={experiment}", *_data_overrides(args), f"paths.cache_dir={args.cache}"],
        )


def ensure_data(args) -> None:
    """Generate the corpus into ``--work/data`` when ``--data`` is not given and it is absent."""
    if args.data is not None:
        return
    if DEFAULT_DATA.is_dir() and args.generate == "20M":
        args.data = DEFAULT_DATA
        return
    args.data = args.work / "data"
    if not any(args.data.glob("test*")):
        print(f"generating a {args.generate}-row corpus into {args.work}")
        code = (
            "from gsr_train.data.rog_corpus import CorpusSpec, write_corpus; "
            f"write_corpus(CorpusSpec.from_rows({_rows(args.generate)}, shape='webqsp'), {str(args.work)!r})"
        )
        subprocess.run([sys.executable, "-c", code], check=True, env=_env(args))


def ensure_checkpoint(args, name: str, given: str | None) -> str:
    """``given``, else the best checkpoint of one epoch of training (run once, kept in ``--work/runs``)."""
    if given:
        return given
    run = args.work / "runs" / name
    found = sorted(run.glob("checkpoints/best-*.ckpt"))
    if not found:
        experiment, epochs = (
            ("gnnrag_webqsp_mini", "retriever.train.epochs=1")
            if name == "gnn"
            else ("subgraphrag_quickstart", "model.train.epochs=1")
        )
        print(f"training {name} for one epoch into {run}")
        cmd = [sys.executable, "train.py", f"+experiment={experiment}", *_data_overrides(args), epochs]
        if name == "gnn":  # the reference path (tests/oracles) serves one GNN with every-path evidence
            cmd += ["retriever.options.members=1", "retriever.options.path_bonus=0.0"]
        cmd += ["trainer.enable_progress_bar=false", f"hydra.run.dir={run}"]
        subprocess.run(cmd, check=True, cwd=ROOT, env=_env(args))
        found = sorted(run.glob("checkpoints/best-*.ckpt"))
    return str(found[-1])


def run_stage(args) -> None:
    """One measurement (child process): open the data, time the scoring, save the output, print figures."""
    import resource

    import torch
    from benchutil import peak_rss_mb

    from gsr_train.config import as_dict
    from gsr_train.runtime.run_data import load_kg_index
    from gsr_train.text.embeddings import get_embeddings

    cfg = _compose(args, "subgraphrag_quickstart" if args.stage == "subgraphrag" else "gnnrag_webqsp_mini")
    index = load_kg_index(cfg, evaluate=[args.split])
    emb = get_embeddings(index, as_dict(cfg.encoder), args.cache, splits=[args.split])
    split = index[args.split]
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if args.stage == "subgraphrag":
        from gsr_train.options.preflight import subgraphrag_settings as settings
        from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever

        run_cfg = settings(cfg)[0]
        retriever = SubgraphRAGRetriever.from_checkpoint(
            args.subgraphrag_checkpoint, device=device, serving=str(run_cfg["serving"]), workers=None
        )
        results = args.work / f"results_subgraphrag_{args.split}.jsonl"

        def work():
            return retriever.retrieve(
                index,
                args.split,
                emb,
                results,
                k=int(cfg.top_k),
                graphs_per_batch=int(run_cfg["eval_graphs_per_batch"]),
            )
    else:
        from gsr_train.models.edge_scorer import load_edge_scorer

        if args.stage == "gnn_before":
            sys.path.insert(0, str(ROOT))  # the reference path lives in tests/oracles, outside the package
            from tests.oracles.gnn_serving_reference import serve
        else:
            from gsr_train.retrievers.edge_scorer import serve
        module = load_edge_scorer(args.gnn_checkpoint, map_location=device).eval()

        def work():
            return serve(module, index, split, emb.question[args.split], emb, args.graphs_per_batch)

    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    out = work()
    sync()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    if args.stage != "subgraphrag":
        scores, extra = out
        torch.save({"scores": scores, "extra": extra}, args.work / f"{args.stage}.pt")
    figures = {
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "peak_rss_mb": peak_rss_mb(),
        "minor_page_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
        "questions": len(split),
        "edges": int(split.edge_ptr[-1]),
    }
    if device.type == "cuda":
        figures["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    if args.stage == "subgraphrag":
        figures["parts"] = {k: round(v, 3) for k, v in retriever.timings.items()}
    print(MARK + json.dumps(figures), flush=True)


def _child(args, stage: str) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--stage", stage, "--data", str(args.data)]
    cmd += ["--data-name", args.data_name, "--work", str(args.work), "--cache", str(args.cache)]
    cmd += ["--split", args.split, "--encoder", args.encoder, "--device", args.device]
    cmd += ["--graphs-per-batch", str(args.graphs_per_batch)]
    cmd += ["--gnn-checkpoint", args.gnn_checkpoint, "--subgraphrag-checkpoint", args.subgraphrag_checkpoint]
    load = os.getloadavg()[0]
    done = subprocess.run(cmd, cwd=ROOT, env=_env(args), capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"stage {stage} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    line = [x for x in done.stdout.splitlines() if x.startswith(MARK)][-1]
    return {**json.loads(line[len(MARK) :]), "load_avg_before": round(load, 2)}


def _ranking(scores, edge_ptr):
    """Every triple's place in its question's ranking (best first, ties to the earlier triple)."""
    import numpy as np

    sizes = (edge_ptr[1:] - edge_ptr[:-1]).numpy()
    question = np.repeat(np.arange(sizes.size), sizes)
    return np.lexsort((np.arange(scores.numel()), -scores.double().numpy(), question))


def compare(args) -> dict:
    """Before vs after: the largest score difference and whether every part of the rows is the same."""
    import numpy as np
    import torch

    from gsr_train.runtime.run_data import load_kg_index

    before = torch.load(args.work / "gnn_before.pt", weights_only=False)
    after = torch.load(args.work / "gnn_after.pt", weights_only=False)
    a, b = before["scores"], after["scores"]
    both_inf = torch.isinf(a) & torch.isinf(b) & (a == b)
    diff = float((a[~both_inf] - b[~both_inf]).abs().max()) if bool((~both_inf).any()) else 0.0
    edge_ptr = load_kg_index(_compose(args, "gnnrag_webqsp_mini"))[args.split].edge_ptr
    rows_a, rows_b = before["extra"].get("row_fields", {}), after["extra"].get("row_fields", {})
    counts = ("no_topic_entity", "no_candidate", "candidates", "candidates_without_path")
    out = {
        "max_abs_score_diff": diff,
        "same_triple_ranking": bool(np.array_equal(_ranking(a, edge_ptr), _ranking(b, edge_ptr))),
        "same_answers": rows_a.get("answers") == rows_b.get("answers"),
        "same_paths": rows_a.get("paths") == rows_b.get("paths"),
        "same_counts": all(before["extra"].get(k) == after["extra"].get(k) for k in counts),
        "candidates": after["extra"].get("candidates"),
        "paths": sum(len(p) for p in rows_b.get("paths", [])),
    }
    out["identical"] = bool(
        diff <= 1e-6 and all(out[k] for k in ("same_triple_ranking", "same_answers", "same_paths", "same_counts"))
    )
    return out


def table(doc: dict):
    from rich.table import Table

    s = doc["stages"]
    t = Table(
        title=f"GNN-RAG serving vs SubgraphRAG: {doc['data']['name']} {doc['data']['split']} "
        f"({s['gnn_after']['questions']:,} questions, {s['gnn_after']['edges']:,} triples), {doc['device']}"
    )
    for col in ("scoring", "seconds", "CPU seconds", "vs SubgraphRAG", "peak RSS GB", "notes"):
        t.add_column(col, justify="left" if col in ("scoring", "notes") else "right")
    sg = s["subgraphrag"]["seconds"]
    same = doc["identical"]
    notes = {
        "gnn_before": "reference path (tests/oracles)",
        "gnn_after": f"{doc['speedup']:.1f}x faster; identical: {'yes' if same['identical'] else 'NO'} "
        f"(max |d score| {same['max_abs_score_diff']:.1e})",
        "subgraphrag": "retrieve(): projections, scoring, results file",
    }
    labels = {"gnn_before": "GNN-RAG before", "gnn_after": "GNN-RAG after", "subgraphrag": "SubgraphRAG"}
    for name, label in labels.items():
        r = s[name]
        t.add_row(
            label,
            f"{r['seconds']:.1f}",
            f"{r['cpu_seconds']:.1f}",
            f"{r['seconds'] / sg:.2f}x",
            f"{r['peak_rss_mb'] / 1024:.2f}",
            notes[name],
        )
    return t


def main() -> None:
    from benchutil import save_figures

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="a RoG folder (default: the 20M-row corpus)")
    ap.add_argument("--data-name", default=None, help="the data's name in runs (default: the folder's parent)")
    ap.add_argument("--generate", default="20M", help="rows of the corpus generated when --data is not given")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_gnn_serving"))
    ap.add_argument("--cache", type=Path, default=None, help="default: $GSR_TRAIN_CACHE, else --work/cache")
    ap.add_argument("--split", default="test")
    ap.add_argument("--encoder", default="hashing")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--graphs-per-batch", type=int, default=64, help="GNN graphs scored at once (the runner's)")
    ap.add_argument("--gnn-checkpoint", default=None)
    ap.add_argument("--subgraphrag-checkpoint", default=None)
    ap.add_argument("--repeat", type=int, default=2, help="rounds of the three measurements (fastest kept)")
    ap.add_argument("--stage", choices=STAGES, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "bench_gnn_serving.json"))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    args.cache = args.cache or Path(os.environ.get("GSR_TRAIN_CACHE") or args.work / "cache")
    if args.stage:
        run_stage(args)
        return
    import torch
    from rich.console import Console

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here")
    ensure_data(args)
    args.data_name = args.data_name or (args.data.parent.name if args.data.name == "data" else args.data.name)
    args.gnn_checkpoint = ensure_checkpoint(args, "gnn", args.gnn_checkpoint)
    args.subgraphrag_checkpoint = ensure_checkpoint(args, "subgraphrag", args.subgraphrag_checkpoint)
    runs: dict[str, list[dict]] = {name: [] for name in STAGES}
    for round_ in range(args.repeat):
        for name in STAGES:
            runs[name].append(_child(args, name))
            print(f"round {round_ + 1}: {name} {runs[name][-1]['seconds']:.1f} s")
    stages = {name: min(found, key=lambda r: r["seconds"]) for name, found in runs.items()}
    doc = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "load_avg_after": os.getloadavg(),
        },
        "data": {"name": args.data_name, "dir": str(args.data), "split": args.split, "encoder": args.encoder},
        "device": args.device,
        "checkpoints": {"gnn": args.gnn_checkpoint, "subgraphrag": args.subgraphrag_checkpoint},
        "graphs_per_batch": args.graphs_per_batch,
        "stages": stages,
        "all_runs": runs,
        "identical": compare(args),
    }
    sg = stages["subgraphrag"]["seconds"]
    doc["ratio_before"] = round(stages["gnn_before"]["seconds"] / sg, 3)
    doc["ratio_after"] = round(stages["gnn_after"]["seconds"] / sg, 3)
    doc["speedup"] = round(stages["gnn_before"]["seconds"] / stages["gnn_after"]["seconds"], 3)
    Console(width=160).print(table(doc))
    save_figures(args.out, doc)


if __name__ == "__main__":
    main()
