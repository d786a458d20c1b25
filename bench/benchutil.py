"""Shared by the benchmark scripts (run as ``python bench/NAME.py``, so this folder is on sys.path)."""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def use_checkout_src() -> Path:
    """Puts the checkout's src/ first on sys.path (a bench times this checkout's code); the checkout."""
    sys.path.insert(0, str(ROOT / "src"))
    return ROOT


def add_fixture_arguments(parser) -> None:
    """``--data`` (webqsp_mini beside the checkout) and ``--cache`` (GSR_TRAIN_CACHE, else .cache): the
    fixture benches' inputs, written once."""
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "webqsp_mini"))
    parser.add_argument("--cache", default=os.environ.get("GSR_TRAIN_CACHE", str(ROOT / ".cache")))


def best_time(fn, repeat: int):
    """Fastest of ``repeat`` calls of ``fn`` (seconds) and the last call's result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MB), the figure every benchmark prints."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def save_figures(out: str | Path, doc: dict) -> None:
    """The benchmark's figures as JSON next to its table (atomic: a killed run leaves the old file)."""
    from gsr_train.io import write_json

    write_json(out, doc, indent=1)
    print(f"wrote {out}")


# ----------------------------------------------------------------------------- devices
def add_device_argument(parser, default: str = "cpu") -> None:
    """``--device cpu | cuda | cuda:N | auto`` (auto: CUDA where there is one)."""
    parser.add_argument("--device", default=default, help="cpu, cuda (cuda:N) or auto (CUDA when available)")


def resolve_device(name: str):
    """The torch device of ``--device``; asking for CUDA where there is none is one clear error."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: no CUDA device is visible on this machine")
    return device


def sync(device) -> None:
    """Wait for the device's queued work: a timer around CUDA calls otherwise reads only the launches."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeat: int = 1):
    """Like :func:`best_time`, with the device synchronised before and after every call."""

    def call():
        sync(device)
        out = fn()
        sync(device)
        return out

    return best_time(call, repeat)


def reset_peak_gpu(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gpu_mb(device) -> float | None:
    """Peak GPU memory allocated by torch since the last reset (MB); None on the CPU."""
    import torch

    if torch.device(device).type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)


def device_info(device) -> dict:
    """What the figures ran on: the device, its name, torch and the CPU threads."""
    import os
    import platform

    import torch

    device = torch.device(device)
    info = {
        "device": str(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": len(os.sched_getaffinity(0)),
        "load_avg": round(os.getloadavg()[0], 2),
    }
    if device.type == "cuda":
        info.update(name=torch.cuda.get_device_name(device), cuda=torch.version.cuda)
    else:
        info["name"] = platform.processor() or platform.machine()
    return info


def device_label(info: dict) -> str:
    """``cuda (NVIDIA H200)`` / ``cpu (x86_64, 2 threads)``: how tables say where they ran."""
    if info["device"].startswith("cuda"):
        return f"{info['device']} ({info['name']})"
    return f"cpu ({info['name']}, {info['threads']} thread(s))"
