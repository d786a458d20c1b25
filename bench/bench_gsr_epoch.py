"""One GSR training epoch on webqsp_paths, the reference way and the fast way, in the same run.

Trains ``+experiment=gsr_webqsp_paths`` (MiniLM encoder + small decoder, its data and its
validation: loss + beam decoding of every validation question) for ``--epochs`` through the
runner's own path (:func:`gsr_train.runs.gsr.train_gsr`: Lightning fit, checkpoint), each way in a
fresh process (so each peak RSS is its own):

* ``reference``: ``trainer.precision=32 gsr.length_groups=0 gsr.pack=false gsr.fused_adamw=false
  gsr.deterministic_fill=true``, how the recipe trained before any of this (fp32, every batch padded
  to its longest question, AdamW's per-parameter loop, torch's NaN fill of new tensors under
  ``trainer.deterministic``);
* ``groups_bf16``: ``gsr.length_groups=8`` + ``trainer.precision=bf16-mixed`` with the three others
  still off: the recipe of the first speed-up (the encoder on groups of 8 questions of similar length,
  each padded to its own longest; the decoder's cross-attention projects each question's keys and
  values once; bf16 autocast);
* ``fp32_fast``: every speed-up that keeps the math, in fp32 (``trainer.precision=32``): the encoder
  reads the batch's questions packed end to end, each attending to itself (``gsr.pack``: no padding,
  one pass), fused AdamW (``gsr.fused_adamw``), no NaN fill (``gsr.deterministic_fill=false``): the
  same numbers as the reference, to float rounding;
* ``fast``: the recipe as users run it: that + ``trainer.precision=bf16-mixed`` (bf16 autocast, fp32
  weights and optimiser).

Prints seconds per epoch (wall clock and process CPU time: CPU time is what a quiet machine would
show when other jobs share the cores; and the CPU time of the training steps alone, forward +
backward + optimiser, without validation and checkpoints), the ratios, peak RSS and the validation match@1 / @3 (with
95% bootstrap intervals) after the last epoch, and writes them to bench/results/gsr_epoch.json.
Whether the fast way reaches the same chain match over a whole run (6 epochs, test too) is in
docs/explanations/gsr-learning-curve.md.

    python bench/bench_gsr_epoch.py [--epochs 1] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import peak_rss_mb, save_figures
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
SPEEDUPS_OFF = ["gsr.pack=false", "gsr.fused_adamw=false", "gsr.deterministic_fill=true"]
WAYS = {
    "reference": ["trainer.precision=32", "gsr.length_groups=0", *SPEEDUPS_OFF],
    "groups_bf16": ["trainer.precision=bf16-mixed", *SPEEDUPS_OFF],  # the first speed-up's recipe
    "fp32_fast": ["trainer.precision=32"],  # packing, fused AdamW, no NaN fill: the same math as the reference
    "fast": ["trainer.precision=bf16-mixed"],  # the recipe: + bf16 autocast
}


def make_step_timer():
    """A Lightning callback (``+callbacks.step_timer``): the process CPU seconds spent inside training
    steps (forward, backward, optimiser), in its ``seconds``."""
    import pytorch_lightning as pl

    class StepTimer(pl.Callback):
        def __init__(self) -> None:
            self.seconds = 0.0
            self._start = 0.0

        def on_train_batch_start(self, *args, **kwargs) -> None:
            self._start = time.process_time()

        def on_train_batch_end(self, *args, **kwargs) -> None:
            self.seconds += time.process_time() - self._start

    return StepTimer()


def worker(way: str, epochs: int, threads: int, out: str) -> None:
    """Train ``epochs`` epochs ``way``; the figures as JSON in ``out``."""
    import logging

    import torch
    from hydra import compose, initialize_config_dir

    from gsr_train.config import register_resolvers
    from gsr_train.models.gsr.modeling import build_gsr_model
    from gsr_train.runs.gsr import gsr_model, gsr_recipe, prepare_paths_data, relation_vocab, train_gsr
    from gsr_train.runtime.training import run_fitting

    logging.basicConfig(level=logging.WARNING)
    register_resolvers()
    tmp = tempfile.mkdtemp(prefix=f"bench_gsr_epoch_{way}_")
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                "+experiment=gsr_webqsp_paths",
                f"model.epochs={epochs}",
                f"paths.output_dir={tmp}",
                "logger=none",
                "~callbacks.rich_progress",
                "trainer.enable_progress_bar=false",
                f"gsr.threads={threads}",
                "+callbacks.step_timer._target_=__main__.make_step_timer",
                *WAYS[way],
            ],
        )
    torch.set_num_threads(threads)
    torch.manual_seed(int(cfg.seed))
    g = gsr_recipe(cfg)
    data = prepare_paths_data(cfg, g)
    gsr = build_gsr_model(dict(cfg.model), relation_vocab(g, data))
    cpu0 = time.process_time()
    _, seconds, figures = train_gsr(run_fitting(cfg), g, gsr_model(cfg), data, gsr)
    cpu = time.process_time() - cpu0
    timer = next(c for c in figures["trainer"].callbacks if type(c).__name__ == "StepTimer")
    curve = json.loads((Path(tmp) / "val_curve.json").read_text())["epochs"][-1]
    doc = {
        "way": way,
        "overrides": WAYS[way],
        "precision": str(cfg.trainer.precision),
        "length_groups": int(cfg.gsr.length_groups),
        "pack": bool(cfg.gsr.pack),
        "fused_adamw": bool(cfg.gsr.fused_adamw),
        "deterministic_fill": bool(cfg.gsr.deterministic_fill),
        "epochs": epochs,
        "steps": int(figures["global_step"]),
        "seconds_per_epoch": seconds / epochs,
        "cpu_seconds_per_epoch": cpu / epochs,
        "step_cpu_seconds_per_epoch": timer.seconds / epochs,
        "peak_rss_mb": peak_rss_mb(),
        "val": curve,
    }
    Path(out).write_text(json.dumps(doc))


def run_way(way: str, epochs: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        cmd = [sys.executable, __file__, "--worker", way, "--epochs", str(epochs), "--threads", str(threads)]
        subprocess.run(
            [*cmd, "--worker-out", str(out)], check=True, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
        return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "gsr_epoch.json"))
    ap.add_argument("--worker", choices=sorted(WAYS), help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.epochs, args.threads, args.worker_out)
        return
    rows = {way: run_way(way, args.epochs, args.threads) for way in WAYS}
    ref = rows["reference"]
    ratios = {
        way: {
            "wall": ref["seconds_per_epoch"] / r["seconds_per_epoch"],
            "cpu": ref["cpu_seconds_per_epoch"] / r["cpu_seconds_per_epoch"],
            "steps_cpu": ref["step_cpu_seconds_per_epoch"] / r["step_cpu_seconds_per_epoch"],
        }
        for way, r in rows.items()
        if way != "reference"
    }
    table = Table(title=f"GSR epoch on webqsp_paths (gsr_minilm, {args.epochs} epoch(s), {args.threads} thread(s))")
    cols = (
        "way",
        "precision",
        "encoder",
        "AdamW",
        "NaN fill",
        "steps",
        "s/epoch",
        "CPU s/epoch",
        "steps CPU s",
        "peak RSS MB",
    )
    for col in (*cols, "val @1", "val @3"):
        table.add_column(col, justify="right")
    for way, r in rows.items():
        v = r["val"]
        table.add_row(
            way,
            r["precision"],
            "packed" if r["pack"] else (f"groups of {r['length_groups']}" if r["length_groups"] else "padded"),
            "fused" if r["fused_adamw"] else "loop",
            "yes" if r["deterministic_fill"] else "no",
            str(r["steps"]),
            f"{r['seconds_per_epoch']:.1f}",
            f"{r['cpu_seconds_per_epoch']:.1f}",
            f"{r['step_cpu_seconds_per_epoch']:.1f}",
            f"{r['peak_rss_mb']:.0f}",
            f"{v['match@1']:.3f} ({v['match@1_low']:.2f}-{v['match@1_high']:.2f})",
            f"{v['match@3']:.3f} ({v['match@3_low']:.2f}-{v['match@3_high']:.2f})",
        )
    console = Console()
    console.print(table)
    for way, ratio in ratios.items():
        console.print(
            f"reference / {way}: {ratio['wall']:.2f}x wall clock, {ratio['cpu']:.2f}x CPU time, "
            f"{ratio['steps_cpu']:.2f}x CPU time of the training steps"
        )
    save_figures(args.out, {"epochs": args.epochs, "threads": args.threads, "ways": rows, "ratio": ratios})


if __name__ == "__main__":
    main()
