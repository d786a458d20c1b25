"""SubgraphRAG training throughput on the webqsp_mini train split, with the recall reached.

Runs, in one process, with MiniLM embeddings (cached; ``--encoder hashing`` where MiniLM is not
installed) and Lightning's training loop, on ``--device`` (cpu, cuda, auto):

* ``straightforward``: the paper's architecture trained the way the public code does it
  (one graph per step, concatenate ``[z_q, z_h, z_r, z_t, z_tau]`` per triple, Linear ->
  ReLU -> Linear, plain Adam) on the first ``--ref-graphs`` graphs: the slower way;
* ``paper``: the same model and recipe (one graph per step) on our training path
  (per-part projections, cache-blocked per-triple op, fused Adam), ``--paper-epochs``;
* ``ours``: the default model config (``conf/model/subgraphrag.yaml``) for ``--epochs``;
* ``ours_bf16`` (``--bf16``): the same with bfloat16 entity-projection matmuls in training.

Throughput counts training steps only (validation excluded): wall-clock triples per second,
the device synchronised at each step's start and end (a CUDA step is timed to its last kernel,
not its launch), and on the CPU also per second of process CPU time (what a quiet machine would
show when other jobs share the cores). Peak RSS and peak GPU memory are given per run. Recall:
best validation shortest-path recall@100, and test answer /
shortest-path / GPT-labelled recall at K = 10, 20, 100 of the best checkpoint. The public
implementation's figure on this machine (issue 3: ~45 s/epoch, ~22k triples/s) is
printed for reference.

    python bench/bench_subgraphrag_training.py [--epochs 15] [--paper-epochs 3] [--device cuda]

Writes bench/results/bench_subgraphrag_training.json.
"""

from __future__ import annotations

import argparse
import functools
import logging
import time
import warnings
from pathlib import Path

import benchutil
import torch
from benchutil import (
    add_device_argument,
    device_info,
    device_label,
    peak_gpu_mb,
    peak_rss_mb,
    reset_peak_gpu,
    resolve_device,
    sync,
)

ROOT = benchutil.use_checkout_src()

from gsr_train.io import write_json  # noqa: E402
from gsr_train.models.subgraphrag.perf import keep_freed_memory  # noqa: E402

PUBLIC_TRIPLES_PER_S = 22_000
PUBLIC_S_PER_EPOCH = 45.0
KS = [10, 20, 100]


class StepTimer:
    """Lightning callback: wall / CPU time and triples of training steps only (the device is
    synchronised at both ends of a step, so CUDA steps are timed to their last kernel)."""

    def __init__(self, max_steps: int | None = None, device: torch.device | None = None) -> None:
        import pytorch_lightning as pl

        class _CB(pl.Callback):
            def on_train_batch_start(cb, trainer, module, batch, batch_idx):
                sync(self.device)
                self._t = (time.perf_counter(), time.process_time())

            def on_train_batch_end(cb, trainer, module, outputs, batch, batch_idx):
                sync(self.device)
                w, c = self._t
                self.wall += time.perf_counter() - w
                self.cpu += time.process_time() - c
                self.triples += batch.num_triples
                self.steps += 1
                if self.max_steps and self.steps >= self.max_steps:
                    trainer.should_stop = True

        self.callback = _CB()
        self.wall = self.cpu = 0.0
        self.triples = self.steps = 0
        self.max_steps = max_steps
        self.device = device or torch.device("cpu")


def load(args):
    from gsr_train.eval.labels import load_labelled_triples
    from gsr_train.kg.index import get_index
    from gsr_train.kg.paths import get_supervision
    from gsr_train.text.embeddings import get_embeddings

    data = Path(args.data)
    index = get_index(data, cache_dir=args.cache)
    emb = get_embeddings(index, args.encoder, args.cache)
    sup = {s: get_supervision(index, s, args.cache) for s in index.splits}
    labels = load_labelled_triples(data / "gpt_triples_test.jsonl.gz", index, "test")
    return index, emb, sup, labels


def train(
    name,
    index,
    emb,
    sup,
    labels,
    model_opts,
    train_opts,
    epochs,
    out,
    train_forward="fast",
    max_steps=None,
    evaluate=True,
    val=True,
    device=None,
):
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    from gsr_train.datamodules.triple_datamodule import TripleDataModule
    from gsr_train.eval.retrieval import retrieval_metrics
    from gsr_train.models.subgraphrag.module import SubgraphRAGModule
    from gsr_train.models.subgraphrag.scorer import ScorerConfig
    from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever

    pl.seed_everything(0)
    cfg = ScorerConfig.from_options(model_opts, emb.dim)
    dm = TripleDataModule(
        index,
        emb,
        sup,
        cfg.structure,
        cfg.dde_forward,
        cfg.dde_reverse,
        graphs_per_batch=int(train_opts["graphs_per_batch"]),
        val_split="validation" if val else None,
        eval_graphs_per_batch=128,
        seed=0,
    )
    module = SubgraphRAGModule(
        model_opts,
        emb.dim,
        optim=train_opts.get("optim"),
        loss=train_opts.get("loss"),
        val_k=100,
        seed=0,
        train_forward=train_forward,
    ).validate_on(dm if val else None)
    device = torch.device(device or "cpu")
    cuda = device.type == "cuda"
    timer = StepTimer(max_steps, device)
    reset_peak_gpu(device)
    callbacks = [timer.callback]
    ckpt = None
    if val:
        ckpt = ModelCheckpoint(dirpath=out / name, monitor="val/sp_recall@100", mode="max", save_last=False)
        callbacks.append(ckpt)
    trainer = pl.Trainer(
        accelerator="gpu" if cuda else "cpu",
        devices=[device.index or 0] if cuda else 1,
        max_epochs=epochs,
        deterministic=not cuda,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        default_root_dir=str(out),
    )
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, dm)
    row = {
        "model": model_opts.get("name", name),
        "graphs_per_batch": int(train_opts["graphs_per_batch"]),
        "train_forward": train_forward,
        "epochs": trainer.current_epoch if max_steps is None else None,
        "steps": timer.steps,
        "triples": timer.triples,
        "train_wall_s": timer.wall,
        "train_cpu_s": timer.cpu,
        "fit_wall_s": time.perf_counter() - t0,
        "triples_per_s_wall": timer.triples / max(timer.wall, 1e-9),
        # process CPU time says nothing of a GPU's work: the CPU figure only where the CPU trains
        "triples_per_s_process_cpu": None if cuda else timer.triples / max(timer.cpu, 1e-9),
        "s_per_epoch_wall": timer.wall / max(trainer.current_epoch, 1) if max_steps is None else None,
        "peak_rss_mb": peak_rss_mb(),
        "peak_gpu_mb": peak_gpu_mb(device),
    }
    if ckpt is not None and ckpt.best_model_score is not None:
        row["best_val_sp_recall@100"] = float(ckpt.best_model_score)
    if evaluate and ckpt is not None and ckpt.best_model_path:
        retriever = SubgraphRAGRetriever.from_checkpoint(ckpt.best_model_path, device=device)
        split = index["test"]
        scores = retriever.score_split(split, emb.question["test"], emb)
        lab, lq, _ = labels
        rep = retrieval_metrics(split, scores, KS, sup["test"].triple_label, lab, lq, sup["test"].hops, device=device)
        row["test"] = {m: {k: rep.overall[m][k] for k in KS} for m in ("answer_recall", "sp_recall", "labelled_recall")}
    return row


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    benchutil.add_fixture_arguments(p)
    p.add_argument("--epochs", type=int, default=None, help="epochs of 'ours' (default: its config's)")
    p.add_argument("--paper-epochs", type=int, default=3)
    p.add_argument("--ref-graphs", type=int, default=150, help="graphs (steps) of the straightforward run")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--encoder", default="minilm", help="minilm (the default) or hashing (no model to install)")
    add_device_argument(p)
    p.add_argument("--skip", nargs="*", default=[], choices=["straightforward", "paper", "ours"])
    p.add_argument(
        "--bf16",
        action="store_true",
        help="also train 'ours' with bfloat16 entity projections (train_projection_dtype; AMX / AVX512-BF16)",
    )
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "bench_subgraphrag_training.json"))
    p.add_argument("--workdir", default=None, help="checkpoints of the runs (default: a temporary folder)")
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    import tempfile

    from omegaconf import OmegaConf

    out = Path(args.workdir or tempfile.mkdtemp(prefix="bench_sgr_"))
    ours = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "model" / "subgraphrag.yaml"))
    paper = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "model" / "subgraphrag_paper.yaml"))
    ours_train, paper_train = ours.pop("train"), paper.pop("train")
    index, emb, sup, labels = load(args)
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # what a run does on CUDA (float32_matmul_precision: null)
    run = functools.partial(train, device=device)
    rows = {}
    if "straightforward" not in args.skip:
        ref_model = {**paper, "fused": False}
        rows["straightforward"] = run(
            "straightforward",
            index,
            emb,
            sup,
            labels,
            ref_model,
            {**paper_train, "optim": {**paper_train["optim"], "fused": False}},
            1,
            out,
            train_forward="reference",
            max_steps=args.ref_graphs,
            evaluate=False,
            val=False,
        )
    if "paper" not in args.skip:
        rows["paper"] = run("paper", index, emb, sup, labels, paper, paper_train, args.paper_epochs, out)
    if "ours" not in args.skip:
        rows["ours"] = run("ours", index, emb, sup, labels, ours, ours_train, args.epochs or ours_train["epochs"], out)
    if args.bf16:
        rows["ours_bf16"] = run(
            "ours_bf16",
            index,
            emb,
            sup,
            labels,
            {**ours, "train_projection_dtype": "bfloat16"},
            ours_train,
            args.epochs or ours_train["epochs"],
            out,
        )
    base = rows.get("straightforward")
    for row in rows.values():
        row["x_public"] = row["triples_per_s_wall"] / PUBLIC_TRIPLES_PER_S
        if base:
            row["x_straightforward_wall"] = row["triples_per_s_wall"] / base["triples_per_s_wall"]
            if row["triples_per_s_process_cpu"] and base["triples_per_s_process_cpu"]:
                row["x_straightforward_process_cpu"] = (
                    row["triples_per_s_process_cpu"] / base["triples_per_s_process_cpu"]
                )
    info = device_info(device)
    result = {
        "machine": info,
        "train_triples_per_epoch": int(index["train"].edge_ptr[-1]),
        "public_reference": {"triples_per_s": PUBLIC_TRIPLES_PER_S, "s_per_epoch": PUBLIC_S_PER_EPOCH},
        "runs": rows,
    }
    print(
        f"\nTraining throughput on webqsp_mini train ({result['train_triples_per_epoch']:,} triples/epoch) on "
        f"{device_label(info)}, load average {info['load_avg']:.1f}; public code (2-core CPU): "
        f"~{PUBLIC_S_PER_EPOCH:.0f} s/epoch, ~{PUBLIC_TRIPLES_PER_S:,} triples/s"
    )
    print(
        "| run | graphs/step | epochs/steps | triples/s (wall) | triples/s (process CPU time) | x public (wall) | "
        "x straightforward (wall / process CPU) | s/epoch (wall) | peak RSS GB | peak GPU GB | best val SP@100 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def num(v, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    for name, r in rows.items():
        xs = (
            f"{r['x_straightforward_wall']:.1f} / {num(r.get('x_straightforward_process_cpu'), '.1f')}"
            if "x_straightforward_wall" in r
            else "-"
        )
        spe = f"{r['s_per_epoch_wall']:.1f}" if r.get("s_per_epoch_wall") else "-"
        ep = r["epochs"] if r["epochs"] is not None else f"{r['steps']} steps"
        val = f"{r['best_val_sp_recall@100']:.4f}" if "best_val_sp_recall@100" in r else "-"
        gpu = None if r["peak_gpu_mb"] is None else r["peak_gpu_mb"] / 1024
        print(
            f"| {name} | {r['graphs_per_batch']} | {ep} | {r['triples_per_s_wall']:,.0f} | "
            f"{num(r['triples_per_s_process_cpu'], ',.0f')} | {r['x_public']:.1f} | {xs} | {spe} | "
            f"{r['peak_rss_mb'] / 1024:.2f} | {num(gpu, '.2f')} | {val} |"
        )
    tested = {n: r for n, r in rows.items() if "test" in r}
    if tested:
        print("\nTest recall of the best checkpoint (webqsp_mini test)")
        heads = [f"{m.split('_')[0]}@{k}" for m in ("answer_recall", "sp_recall", "labelled_recall") for k in KS]
        print("| run | " + " | ".join(heads) + " |")
        print("|---|" + "---:|" * len(heads))
        for name, r in tested.items():
            print(
                f"| {name} | "
                + " | ".join(
                    f"{r['test'][m][k]:.3f}" for m in ("answer_recall", "sp_recall", "labelled_recall") for k in KS
                )
                + " |"
            )
    write_json(args.out, result)
    print(f"\nwrote {args.out}")
    return result


if __name__ == "__main__":
    main()
