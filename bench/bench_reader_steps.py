"""Reader training step time: QLoRA (4-bit nf4) vs 16-bit (bf16) vs fp32 LoRA, same model and batch.

    .venv/bin/python bench/bench_reader_steps.py                       # SmolLM2-135M, batch 4 x 128 tokens
    .venv/bin/python bench/bench_reader_steps.py --precisions 4bit bf16 --steps 6 --seq 256
    .venv/bin/python bench/bench_reader_steps.py --device cuda --model /path/to/hf/llama/folder

``--device cuda``: the weights on the GPU (4-bit ones placed there while they load), steps timed to
their last kernel, peak GPU memory next to peak RSS.

``--vary`` varies the batch width per step as real batches do (each is padded to its longest
row) and ``--malloc default keep return`` compares glibc's policies for freed memory, each in its
own process, with the peak RSS and the RSS growth over the second half of the steps.

One optimizer step = forward + backward of the training loss (answer tokens = last quarter of
each row, LM head on those only) + AdamW on the LoRA weights (r=16, alpha=16, all attention +
MLP projections). The first step (warm-up) is excluded;
the median of the rest is reported with the ratio against the slowest path. Prints a table
and writes bench/results/bench_reader_steps.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def step_times(
    model_name: str,
    precision: str,
    batch: int,
    seq: int,
    steps: int,
    grad_ckpt: bool,
    vary: bool = False,
    malloc: str = "default",
    device: str = "cpu",
) -> dict:
    import torch
    from benchutil import peak_gpu_mb, reset_peak_gpu, sync

    from gsr_train.memory import keep_freed_memory, peak_rss_mb, return_freed_memory, rss_mb
    from gsr_train.readers.model import answer_loss, count_parameters, load_reader

    if malloc == "keep":  # what a SubgraphRAG retrieval earlier in the same process leaves behind
        keep_freed_memory()
    elif malloc == "return":  # what the reader's training sets (ReaderModule.on_train_start)
        return_freed_memory()

    reset_peak_gpu(device)
    t0 = time.perf_counter()
    model, tok, _ = load_reader(
        model_name,
        precision,
        "bf16",
        "lora",
        {"r": 16, "alpha": 16, "dropout": 0.05},
        gradient_checkpointing=grad_ckpt,
        device=device,
    )
    load_s = time.perf_counter() - t0
    model.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, len(tok) - 10, (batch, seq), generator=g)
    labels = ids.clone()
    labels[:, : seq * 3 // 4] = -100  # loss on the last quarter, like answer tokens after a prompt
    mask = torch.ones_like(ids)
    ids, labels, mask = ids.to(device), labels.to(device), mask.to(device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
    times, losses, rss = [], [], []
    widths = torch.randint(seq // 2, seq + 1, (steps,), generator=g).tolist() if vary else [seq] * steps
    for width in widths:  # real batches are padded to their longest row: every step another shape
        sync(device)
        t = time.perf_counter()
        b_ids, b_mask, b_labels = ids[:, -width:], mask[:, -width:], labels[:, -width:]
        loss = answer_loss(model, b_ids, b_mask, b_labels, width - width * 3 // 4)  # LM head on answers only
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        times.append(time.perf_counter() - t)
        losses.append(float(loss.detach()))
        rss.append(round(rss_mb(), 1))
    rest = times[1:] or times
    half = len(rss) // 2
    params = count_parameters(model)
    del model, opt
    return {
        "precision": precision,
        "load_s": load_s,
        "step_s_median": statistics.median(rest),
        "step_s_all": times,
        "tokens_per_s": batch * seq / statistics.median(rest),
        "loss": losses,
        "trainable_params": params["trainable"],
        "total_params": params["total"],
        "malloc": malloc,
        "widths": widths,
        "rss_mb_per_step": rss,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "peak_gpu_mb": peak_gpu_mb(device),
        "device": str(device),
        "rss_growth_second_half_mb": round(rss[-1] - rss[half], 1) if rss else 0.0,
    }


def run_isolated(args, precision: str, malloc: str) -> dict:
    """One configuration in a fresh process: peak memory and allocator policy are per process."""
    import json
    import subprocess

    code = (
        f"import json, sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import torch; "
        f"torch.set_num_threads({args.threads}); from bench_reader_steps import step_times; "
        f"print('RESULT', json.dumps(step_times({args.model!r}, {precision!r}, {args.batch}, {args.seq}, "
        f"{args.steps}, {args.gradient_checkpointing}, {args.vary}, {malloc!r}, {args.device!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
        },
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"{precision}/{malloc} failed:\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--precisions", nargs="+", default=["4bit", "bf16", "fp32"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--vary", action="store_true", help="batch widths vary per step (seq/2..seq), as real batches")
    ap.add_argument(
        "--malloc",
        nargs="+",
        default=["default"],
        choices=["default", "keep", "return"],
        help="glibc policy for freed memory; each is measured in its own process",
    )
    ap.add_argument("--device", default="cpu", help="cpu, cuda (cuda:N) or auto (CUDA when available)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "bench_reader_steps.json"))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from gsr_train.io import write_json

    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(ROOT / "bench"))
    from benchutil import device_info, device_label, resolve_device

    info = device_info(resolve_device(args.device))
    args.device = info["device"]
    rows = [run_isolated(args, p, m) for p in args.precisions for m in args.malloc]
    slowest = max(r["step_s_median"] for r in rows)
    for r in rows:
        r["speedup_vs_slowest"] = slowest / r["step_s_median"]
    print(
        f"model={args.model} batch={args.batch} seq={args.seq} steps={args.steps} (first excluded) "
        f"threads={args.threads} grad_ckpt={args.gradient_checkpointing} on {device_label(info)}"
    )
    print(
        f"{'precision':<10} {'malloc':<8} {'s/step':>8} {'tokens/s':>9} {'vs slowest':>10} {'trainable':>10} "
        f"{'load s':>7} {'peak RSS GB':>11} {'peak GPU GB':>11} {'RSS grew (2nd half) MB':>23}"
    )
    for r in rows:
        gpu = "-" if r["peak_gpu_mb"] is None else f"{r['peak_gpu_mb'] / 1024:.2f}"
        print(
            f"{r['precision']:<10} {r['malloc']:<8} {r['step_s_median']:8.2f} {r['tokens_per_s']:9.1f} "
            f"{r['speedup_vs_slowest']:9.2f}x {r['trainable_params']:10d} {r['load_s']:7.1f} "
            f"{r['peak_rss_mb'] / 1024:11.2f} {gpu:>11} {r['rss_growth_second_half_mb']:23.1f}"
        )
    write_json(args.out, {"args": vars(args), "machine": info, "results": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
