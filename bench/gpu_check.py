"""One command that verifies the project on one GPU: environment, the GPU test lane, the training,
inference, metrics and reader benches on CUDA, and a real-size pipeline with training on the GPU.

    python bench/gpu_check.py                      # everything, about 6 minutes on one H200
    python bench/gpu_check.py --rows 1M --skip reader
    python bench/gpu_check.py --device cpu --rows 200k --reader-size tiny   # a dry run without a GPU (2 min)

Every stage runs in its own process under its own time limit (``--limits stage=seconds``; a dry run's
are ``DRY_RUN_LIMIT_FACTOR`` times longer), so one that fails or hangs is recorded and the rest still run. Stages:

* ``env``: torch, CUDA, the device, its memory, bitsandbytes / Hydra importable, a bf16 matmul;
* ``lane``: ``pytest -m gpu`` (tests/test_gpu.py: CPU-vs-CUDA parity of every model's training step,
  scoring and serving, GSR decoding, the 4-bit reader, the metrics; a ``trainer=gpu`` run per
  experiment family);
* ``training``: bench/bench_subgraphrag_training.py on CUDA (triples/s of the straightforward loop and
  of ours, the recall reached);
* ``inference``: bench/bench_subgraphrag_inference.py on CUDA (straightforward vs precomputed scoring);
* ``metrics``: bench/bench_metrics.py on CUDA (batched metrics vs the per-question loop, same numbers);
* ``reader``: bench/bench_reader_steps.py on CUDA (4-bit vs bf16 vs fp32 LoRA steps of a random
  LLaMA of ``--reader-size``);
* ``scale``: bench/bench_scale.py ``--rows`` (generate, build, prepare, one epoch of SubgraphRAG and of
  the GNN with ``trainer=gpu``).

Prints one table and writes bench/results/gpu_check.json; each bench's own JSON goes to
``--results`` (default bench/results/gpu/). With ``--device cpu`` the same stages run on the CPU
(the lane as a dry run, ``GSR_GPU_LANE=cpu``; figures under ``--work``): how this script itself is
tested without a GPU. Without CUDA, ``--device cuda`` (the default) is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
STAGES = ("env", "lane", "training", "inference", "metrics", "reader", "scale")
LIMITS = {"env": 60, "lane": 240, "training": 120, "inference": 90, "metrics": 60, "reader": 90, "scale": 360}
# A dry run checks the script, not the speed: on a shared 2-core CPU its stages take up to 4x the GPU's
# (inference 90 s there under CI's load, against 36 s idle), so its limits are this many times LIMITS
DRY_RUN_LIMIT_FACTOR = 4
GPU_MARK = re.compile(r"^\s*@pytest\.mark\.gpu\b|^pytestmark\b.*\bpytest\.mark\.gpu\b", re.MULTILINE)

ENV_PROBE = r"""
import importlib, json, os, sys, time, torch
info = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda_build": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(), "cpus": len(os.sched_getaffinity(0))}
for name in ("bitsandbytes", "hydra", "omegaconf", "transformers", "peft", "torch_geometric", "pytorch_lightning"):
    try:
        info[name] = getattr(importlib.import_module(name), "__version__", "?")
    except Exception as e:  # noqa: BLE001
        info[name] = f"missing ({type(e).__name__})"
device = torch.device(sys.argv[1])
if device.type == "cuda":
    p = torch.cuda.get_device_properties(device)
    info.update(device=torch.cuda.get_device_name(device), memory_gb=round(p.total_memory / 2**30, 1),
                capability=f"{p.major}.{p.minor}", multiprocessors=p.multi_processor_count)
n = 4096 if device.type == "cuda" else 512
a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
for _ in range(3):
    a @ a
if device.type == "cuda":
    torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(10):
    a @ a
if device.type == "cuda":
    torch.cuda.synchronize()
info["bf16_matmul_tflops"] = round(10 * 2 * n**3 / (time.perf_counter() - t) / 1e12, 1)
print("RESULT " + json.dumps(info))
"""


def run_stage(name: str, cmd: list[str], limit: float, log: Path, env: dict) -> dict:
    """Run one stage under its time limit; its outcome, wall time and the last lines of its log."""
    t0 = time.perf_counter()
    with open(log, "w") as out:
        try:
            proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=limit)
            status = "ok" if proc.returncode == 0 else f"failed ({proc.returncode})"
        except subprocess.TimeoutExpired:
            status = f"timed out ({limit:.0f} s)"
    seconds = round(time.perf_counter() - t0, 1)
    tail = log.read_text(errors="replace").splitlines()[-12:]
    print(f"[{name}] {status} in {seconds} s", file=sys.stderr, flush=True)
    return {"status": status, "seconds": seconds, "log": str(log), "tail": tail if status != "ok" else []}


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _junit(path: Path) -> dict:
    """Counts of a pytest junit file (tests, failures, errors, skipped) and the failed test names."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    failed = [
        f"{c.get('classname')}::{c.get('name')}"
        for c in suite.iter("testcase")
        if c.find("failure") is not None or c.find("error") is not None
    ]
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    return {
        **counts,
        "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
        "failed": failed,
    }


def tiny_reader(folder: Path, size: str) -> Path:
    """A random LLaMA of ``size`` (small: 4 layers x 512; tiny: the tests' 2 x 64) and the tests' tokenizer."""
    if (folder / "config.json").exists():
        return folder
    code = (
        "import sys, torch; sys.path.insert(0, '.'); from tests.test_reader_helpers import tiny_tokenizer; "
        "from transformers import LlamaConfig, LlamaForCausalLM; tok = tiny_tokenizer(); torch.manual_seed(0); "
        f"w = {512 if size == 'small' else 64}; layers = {4 if size == 'small' else 2}; "
        "cfg = LlamaConfig(vocab_size=len(tok), hidden_size=w, intermediate_size=4 * w, num_hidden_layers=layers, "
        "num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024, bos_token_id=tok.bos_token_id, "
        "eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=False); "
        f"LlamaForCausalLM(cfg).save_pretrained({str(folder)!r}); tok.save_pretrained({str(folder)!r})"
    )
    subprocess.run([PY, "-c", code], cwd=REPO, check=True, capture_output=True)
    return folder


def lane_files(tests: Path = REPO / "tests") -> list[str]:
    """The test modules that mark a test ``gpu``: the lane collects these alone (collecting all of
    ``tests/`` to deselect all but the lane's took 13 of its 17 s before the first test, on the GPU's
    clock too). ``tests/test_gpu_lane_files.py`` checks that every test the suite marks ``gpu`` is in one of them."""
    return [str(p) for p in sorted(tests.glob("test_*.py")) if GPU_MARK.search(p.read_text())]


def commands(args, work: Path, results: Path) -> dict[str, list[str]]:
    dev = args.device
    gpu = dev.startswith("cuda")
    data = str(Path(args.shared) / "webqsp_mini")
    bench = REPO / "bench"
    cache = ["--cache", str(work / "cache")]
    return {
        "env": [PY, "-c", ENV_PROBE, dev],
        "lane": [
            PY, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-n", str(args.lane_workers),
            f"--junitxml={work / 'lane.xml'}", *lane_files(),
        ],
        "training": [
            PY, str(bench / "bench_subgraphrag_training.py"), "--device", dev, "--encoder", args.encoder,
            "--data", data, *cache, "--epochs", str(args.epochs or (3 if gpu else 1)), "--skip", "paper",
            "--ref-graphs", "60" if gpu else "20",
            "--out", str(results / "bench_subgraphrag_training.json"),
        ],
        "inference": [
            PY, str(bench / "bench_subgraphrag_inference.py"), "--device", dev, "--encoder", args.encoder,
            "--data", data, *cache, "--passes", "1", "--questions", "8" if gpu else "2",
            "--repeats", "3" if gpu else "1",  # a dry run checks the script: one timing of each,
            *([] if gpu else ["--vocab", "4000", "--relation-vocab", "600"]),  # and projects 4k entities, not 40k
            "--out", str(results / "bench_subgraphrag_inference.json"),
        ],
        "metrics": [
            PY, str(bench / "bench_metrics.py"), "--device", dev, "--data", data, *cache, "--repeat", "3",
            "--loop-repeat", "1", "--out", str(results / "bench_metrics.json"),
        ],
        "reader": [
            PY, str(bench / "bench_reader_steps.py"), "--device", dev,
            "--model", str(work / f"llama_{args.reader_size}"),
            "--precisions", "4bit", "bf16", "fp32", "--batch", "8", "--seq", "256", "--steps", "6",
            "--out", str(results / "bench_reader_steps.json"),
        ],
        "scale": [
            PY, str(bench / "bench_scale.py"), "--rows", args.rows, "--work", str(work / "scale"),
            "--trainer", "gpu" if gpu else "cpu", "--old-max-rows", "0", "--ddp-max-rows", "0",
            "--gnn-max-rows", args.rows, "--out", str(results / "bench_scale.json"),
        ],
    }  # fmt: skip


def figures(name: str, work: Path, results: Path) -> dict:
    """The headline figures of a finished stage, from the JSON it wrote."""
    if name == "env":
        lines = [ln for ln in (work / "env.log").read_text().splitlines() if ln.startswith("RESULT ")]
        return json.loads(lines[-1][7:]) if lines else {}
    if name == "lane":
        return _junit(work / "lane.xml")
    doc = _json(results / f"bench_{'subgraphrag_' if name in ('training', 'inference') else ''}{name}.json")
    if name == "reader":
        doc = _json(results / "bench_reader_steps.json")
    if name == "training":
        return {
            run: {k: r.get(k) for k in ("triples_per_s_wall", "x_straightforward_wall", "peak_gpu_mb", "test")}
            for run, r in (doc.get("runs") or {}).items()
        }
    if name == "inference":
        return {v: {"speedup": r.get("speedup"), "projected_triples_per_s": r.get("projected_triples_per_s")}
                for v, r in ((doc.get("webqsp_sized_random") or {}).get("variants") or {}).items()}  # fmt: skip
    if name == "metrics":
        return {r["split"]: {"speedup": r["speedup"], "max_abs_diff": r["max_abs_diff"]} for r in doc.get("rows", [])}
    if name == "reader":
        return {r["precision"]: {"s_per_step": r["step_s_median"], "peak_gpu_mb": r.get("peak_gpu_mb")}
                for r in doc.get("results", [])}  # fmt: skip
    if name == "scale":
        out = {}
        for size, r in (_json(results / "bench_scale.json").get("results") or {}).items():
            out[size] = {
                s: {"seconds": r[s]["seconds"], "peak_rss_gb": round(r[s]["peak_rss_mb"] / 1024, 2)}
                for s in ("generate", "build", "prepare", "train", "gnn")
                if isinstance(r.get(s), dict) and "seconds" in r[s]
            }
            for s in ("train", "gnn"):
                if isinstance(r.get(s), dict):
                    out[size][s]["timings"] = r[s].get("timings")
        return out
    return {}


def summary(name: str, fig: dict) -> str:
    """One line of the table per stage."""
    if not fig:
        return ""
    if name == "env":
        where = fig.get("device") or "no CUDA device"
        return f"{where}, torch {fig['torch']} (CUDA {fig['cuda_build']}), bf16 {fig['bf16_matmul_tflops']} TFLOP/s"
    if name == "lane":
        failed = f"; failed: {', '.join(fig['failed'][:4])}" if fig.get("failed") else ""
        return f"{fig['passed']} passed, {fig['failures'] + fig['errors']} failed, {fig['skipped']} skipped{failed}"
    if name == "training":
        ours, base = fig.get("ours") or {}, fig.get("straightforward") or {}
        return (
            f"ours {ours.get('triples_per_s_wall', 0):,.0f} triples/s ({ours.get('x_straightforward_wall') or 0:.1f}x "
            f"the straightforward loop's {base.get('triples_per_s_wall', 0):,.0f})"
        )
    if name == "inference":
        return "; ".join(f"{v} {r['speedup']:.0f}x" for v, r in fig.items() if r.get("speedup"))
    if name == "metrics":
        return "; ".join(f"{s} {r['speedup']:.1f}x" for s, r in fig.items())
    if name == "reader":
        return "; ".join(f"{p} {r['s_per_step'] * 1000:.0f} ms/step" for p, r in fig.items())
    if name == "scale":
        return "; ".join(
            f"{size}: " + ", ".join(f"{s} {v['seconds']:.0f}s" for s, v in stages.items())
            for size, stages in fig.items()
        )
    return ""


def save(args, limits: dict, stages: dict, seconds: float) -> dict:
    """The check's JSON as it stands (written after every stage, atomically)."""
    from gsr_train.io import write_json

    doc = {"device": args.device, "total_seconds": round(seconds, 1), "limits": limits, "stages": stages}
    write_json(args.out, doc, indent=1)
    return doc


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (the check) or cpu (a dry run of the script itself)")
    p.add_argument("--rows", default="20M", help="corpus size of the scale stage (triple rows)")
    p.add_argument("--encoder", default="hashing", help="encoder of the training / inference benches")
    p.add_argument("--epochs", type=int, default=None, help="epochs of 'ours' in the training bench (3; a dry run 1)")
    p.add_argument("--reader-size", default="small", choices=["small", "tiny"])
    p.add_argument("--lane-workers", type=int, default=min(8, max(1, (os.cpu_count() or 2) // 2)))
    p.add_argument("--skip", default="", help="stages to leave out, comma separated: " + ",".join(STAGES))
    p.add_argument("--limits", default="", help="per-stage time limits, e.g. lane=300,scale=400 (seconds)")
    p.add_argument("--work", default=os.environ.get("GSR_GPU_CHECK_DIR", "/tmp/gsr_gpu_check"))
    p.add_argument("--shared", default=os.environ.get("GSR_SHARED_DATA", str(REPO.parent / "shared" / "data")))
    p.add_argument("--results", default=None, help="the benches' JSON (default bench/results/gpu; a dry run: --work)")
    p.add_argument(
        "--out", default=None, help="the check's JSON (default bench/results/gpu_check.json; a dry run: --work)"
    )
    args = p.parse_args(argv)
    dry = not args.device.startswith("cuda")  # a dry run's figures stay in its work folder
    args.results = args.results or str(Path(args.work) / "results" if dry else REPO / "bench" / "results" / "gpu")
    args.out = args.out or str(
        Path(args.work) / "gpu_check.json" if dry else REPO / "bench" / "results" / "gpu_check.json"
    )
    skip = {s for s in args.skip.split(",") if s}
    unknown = skip - set(STAGES)
    if unknown:
        p.error(f"--skip {','.join(sorted(unknown))}: stages are {', '.join(STAGES)}")
    factor = 1 if args.device.startswith("cuda") else DRY_RUN_LIMIT_FACTOR
    limits = {stage: seconds * factor for stage, seconds in LIMITS.items()}
    for item in filter(None, args.limits.split(",")):
        stage, _, sec = item.partition("=")
        if stage not in LIMITS or not sec.replace(".", "", 1).isdigit():
            p.error(f"--limits {item}: use stage=seconds with a stage of {', '.join(STAGES)}")
        limits[stage] = float(sec)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(
                f"error: --device {args.device}: no CUDA device is visible here (torch {torch.__version__}); "
                "python bench/gpu_check.py --device cpu dry-runs the check on the CPU",
                file=sys.stderr,
            )
            raise SystemExit(2)
    work, results = Path(args.work), Path(args.results)
    work.mkdir(parents=True, exist_ok=True)
    results.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "PYTHONUNBUFFERED": "1",
        "GSR_SHARED_DATA": args.shared,
        "GSR_TRAIN_CACHE": str(work / "cache"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])),
    }
    if not args.device.startswith("cuda"):
        env["GSR_GPU_LANE"] = "cpu"  # the lane's dry run
    cmds = commands(args, work, results)
    t0 = time.perf_counter()
    stages: dict[str, dict] = {}
    for name in STAGES:
        if name in skip:
            stages[name] = {"status": "skipped", "seconds": 0.0}
            continue
        if name == "reader":
            tiny_reader(work / f"llama_{args.reader_size}", args.reader_size)
        stages[name] = run_stage(name, cmds[name], limits[name], work / f"{name}.log", env)
        finished = stages[name]["status"] == "ok" or name == "lane"  # a failed lane still counts its tests
        stages[name]["figures"] = figures(name, work, results) if finished else {}
        save(args, limits, stages, time.perf_counter() - t0)  # a check stopped from outside keeps what it did
    total = round(time.perf_counter() - t0, 1)

    table = Table(title=f"GPU check ({args.device}): {total:.0f} s in all")
    for col in ("stage", "status", "seconds", "figures"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for name, st in stages.items():
        table.add_row(name, st["status"], f"{st['seconds']:.1f}", summary(name, st.get("figures") or {}))
    Console(width=220).print(table)
    doc = save(args, limits, stages, total)
    print(f"wrote {args.out}")
    bad = [n for n, st in stages.items() if st["status"] not in ("ok", "skipped")]
    if bad:
        print(f"not ok: {', '.join(bad)} (logs in {work})", file=sys.stderr)
    return doc


if __name__ == "__main__":
    sys.exit(1 if any(s["status"] not in ("ok", "skipped") for s in main()["stages"].values()) else 0)
