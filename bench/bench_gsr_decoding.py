"""Unconstrained vs KG-constrained GSR decoding (one run, same model).

Trains ``gsr_tiny`` on the synthetic train split of the embedded benchmark (``--epochs``; or
loads ``--model``, a saved GSR folder / .ckpt, e.g. one trained with ``--experiment
gsr_webqsp_paths``), then decodes the test split three times with the same beam settings:
unconstrained beam search + validity filtering (the paper), KG-constrained beam search
(every beam may only continue with relations executable from where it stands) and
constrained + shortest (every hop must also move one hop farther from the topic). Prints
validity, answer recall (both coverage variants), ground-chain match (by name and
end-equivalent) and wall time per mode, and the time ratios; writes the same figures to
``bench/results/gsr_decoding.json`` (``--out``).

    .venv/bin/python bench/bench_gsr_decoding.py [--epochs 10] [--beams 10] [--top-n 3] [--model DIR]
    .venv/bin/python bench/bench_gsr_decoding.py --experiment gsr_webqsp_paths --model runs/<run>/model \
        --out bench/results/gsr_decoding_webqsp_paths.json
    .venv/bin/python bench/bench_gsr_decoding.py --device cuda     # trains (trainer=gpu) and decodes on CUDA
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import torch
from benchutil import add_device_argument, device_info, device_label, peak_gpu_mb, peak_rss_mb, resolve_device
from hydra import compose, initialize_config_dir
from rich.console import Console
from rich.table import Table

from gsr_train.config import register_resolvers
from gsr_train.io import write_json

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--beams", type=int, default=10)
    ap.add_argument("--top-n", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", default=None, help="saved GSR folder or .ckpt (skips training)")
    ap.add_argument("--experiment", default="gsr_quickstart", help="GSR experiment whose data is decoded")
    add_device_argument(ap)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "gsr_decoding.json"))
    args = ap.parse_args()
    device = resolve_device(args.device)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    register_resolvers()
    from gsr_train.models.gsr.modeling import build_gsr_model, load_gsr
    from gsr_train.runs.gsr import evaluate_gsr, prepare_paths_data, prepare_rog_data, relation_vocab, train_gsr

    tmp = tempfile.mkdtemp(prefix="bench_gsr_")
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                f"+experiment={args.experiment}",
                f"model.epochs={args.epochs}",
                f"paths.output_dir={tmp}",
                "experiment_name=bench_gsr_decoding",
                "logger=none",
                "~callbacks.rich_progress",
                "trainer.enable_progress_bar=false",
                f"gsr.decode.beams={args.beams}",
                f"top_k={args.top_n}",
                f"trainer={'gpu' if device.type == 'cuda' else 'cpu'}",
            ],
        )
    torch.manual_seed(int(cfg.seed))
    if cfg.data.get("format") == "paths":
        if not args.model:
            raise SystemExit(f"--experiment {args.experiment} reads chain files: give --model (a trained GSR)")
        data = prepare_paths_data(cfg)
    else:
        data = prepare_rog_data(cfg)
    t0 = time.perf_counter()
    if args.model:
        gsr, source = load_gsr(args.model), args.model
    else:
        gsr = build_gsr_model(dict(cfg.model), relation_vocab(cfg, data))
        best, _, _ = train_gsr(cfg, data, gsr)
        gsr, source = (load_gsr(best) if best else gsr), f"gsr_tiny trained {args.epochs} epochs"
    train_s = time.perf_counter() - t0
    gsr = gsr.to(device).eval()  # decoding where the run would decode (its trainer's device)
    modes = {}
    for name, constrained, shortest in (
        ("unconstrained", False, False),
        ("constrained", True, False),
        ("constrained+shortest", True, True),
    ):
        cfg.gsr.decode.shortest = shortest
        modes[name] = evaluate_gsr(cfg, data, gsr, constrained=constrained, write=False)
    rows = []
    for name, m in modes.items():
        rows.append(
            {
                "mode": name,
                "valid_fraction": m["validity"]["valid_fraction"],
                f"valid_fraction@{args.top_n}": m["validity"][f"valid_fraction@{args.top_n}"],
                "questions_with_valid_chain": m["validity"]["questions_with_valid_chain"],
                "answer_recall": m["answer_coverage"]["recall"],
                "answer_f1": m["answer_coverage"]["f1"],
                "paper_recall": m["paper_coverage"]["recall"],
                "paper_f1": m["paper_coverage"]["f1"],
                "hits": m["answer_coverage"]["hits"],
                "match@1": m["chain_match"]["match@1"],
                f"match@{args.top_n}": m["chain_match"][f"match@{args.top_n}"],
                "end_match@1": m["end_match"].get("end_match@1", float("nan")),
                f"end_match@{args.top_n}": m["end_match"].get(f"end_match@{args.top_n}", float("nan")),
                "mean_triples": m["mean_triples"],
                "seconds": m["inference_seconds"],
                "decode_seconds": m["decode_seconds"],
            }
        )
    ratio = rows[1]["seconds"] / rows[0]["seconds"] if rows[0]["seconds"] else float("nan")
    ratio_short = rows[2]["seconds"] / rows[1]["seconds"] if rows[1]["seconds"] else float("nan")
    info = device_info(device)
    table = Table(
        title=f"GSR decoding on {args.experiment} (test, {len(data.evaluation)} questions, "
        f"beam {args.beams}, top-{args.top_n} valid) on {device_label(info)}"
    )
    table.add_column("metric")
    for r in rows:
        table.add_column(r["mode"], justify="right")
    for key in rows[0]:
        if key != "mode":
            table.add_row(key, *[f"{r[key]:.4f}" if isinstance(r[key], float) else str(r[key]) for r in rows])
    console = Console()
    console.print(table)
    console.print(
        f"constrained / unconstrained wall time: {ratio:.2f}x; constrained+shortest / constrained: "
        f"{ratio_short:.2f}x   (model: {source}; "
        f"{'loading' if args.model else 'training'} {train_s:.0f}s; threads {args.threads})"
    )
    checks = {
        "constrained_all_valid": rows[1]["valid_fraction"] == 1.0 and rows[2]["valid_fraction"] == 1.0,
        "constrained_recall_at_least_unconstrained": rows[1]["answer_recall"] >= rows[0]["answer_recall"],
    }
    console.print(checks)
    write_json(
        args.out,
        {
            "experiment": args.experiment,
            "model": source,
            "beams": args.beams,
            "top_n": args.top_n,
            "threads": args.threads,
            "machine": info,
            "peak_rss_mb": peak_rss_mb(),
            "peak_gpu_mb": peak_gpu_mb(device),
            "questions": len(data.evaluation),
            "train_seconds": train_s,
            "modes": rows,
            "time_ratio_constrained_over_unconstrained": ratio,
            "time_ratio_shortest_over_constrained": ratio_short,
            "checks": checks,
            "details": modes,
        },
    )
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
