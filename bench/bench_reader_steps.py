"""Reader training step time: QLoRA (4-bit nf4) vs 16-bit (bf16) vs fp32 LoRA, same model and batch.

    .venv/bin/python bench/bench_reader_steps.py                       # SmolLM2-135M, batch 4 x 128 tokens
    .venv/bin/python bench/bench_reader_steps.py --precisions 4bit bf16 --steps 6 --seq 256

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


def step_times(model_name: str, precision: str, batch: int, seq: int, steps: int, grad_ckpt: bool) -> dict:
    import torch

    from gsr_train.readers.model import answer_loss, count_parameters, load_reader

    t0 = time.perf_counter()
    model, tok, _ = load_reader(model_name, precision, "bf16", "lora", {"r": 16, "alpha": 16, "dropout": 0.05},
                                gradient_checkpointing=grad_ckpt)
    load_s = time.perf_counter() - t0
    model.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, len(tok) - 10, (batch, seq), generator=g)
    labels = ids.clone()
    labels[:, : seq * 3 // 4] = -100  # loss on the last quarter, like answer tokens after a prompt
    mask = torch.ones_like(ids)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
    times, losses = [], []
    for _ in range(steps):
        t = time.perf_counter()
        loss = answer_loss(model, ids, mask, labels, seq - seq * 3 // 4)  # the training path (LM head on answers)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t)
        losses.append(float(loss.detach()))
    rest = times[1:] or times
    params = count_parameters(model)
    del model, opt
    return {"precision": precision, "load_s": load_s, "step_s_median": statistics.median(rest),
            "step_s_all": times, "tokens_per_s": batch * seq / statistics.median(rest), "loss": losses,
            "trainable_params": params["trainable"], "total_params": params["total"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--precisions", nargs="+", default=["4bit", "bf16", "fp32"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "bench_reader_steps.json"))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from gsr_train.io import write_json

    torch.set_num_threads(args.threads)
    rows = [step_times(args.model, p, args.batch, args.seq, args.steps, args.gradient_checkpointing)
            for p in args.precisions]
    slowest = max(r["step_s_median"] for r in rows)
    for r in rows:
        r["speedup_vs_slowest"] = slowest / r["step_s_median"]
    print(f"model={args.model} batch={args.batch} seq={args.seq} steps={args.steps} (first excluded) "
          f"threads={args.threads} grad_ckpt={args.gradient_checkpointing}")
    print(f"{'precision':<10} {'s/step':>8} {'tokens/s':>9} {'vs slowest':>10} {'trainable':>10} {'load s':>7}")
    for r in rows:
        print(f"{r['precision']:<10} {r['step_s_median']:8.2f} {r['tokens_per_s']:9.1f} "
              f"{r['speedup_vs_slowest']:9.2f}x {r['trainable_params']:10d} {r['load_s']:7.1f}")
    write_json(args.out, {"args": vars(args), "cpu_threads": torch.get_num_threads(), "results": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
