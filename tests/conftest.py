"""Shared test setup: offline hub, offline wandb, and paths to the real fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

if not os.environ.get("GSR_TEST_COLD"):  # the commands the tests start fork from a warm interpreter
    import subprocess

    from .warm_python import WarmPopen

    subprocess.Popen = WarmPopen  # type: ignore[misc]

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("GSR_SHARED_DATA", REPO.parent / "shared" / "data"))


# The device the GPU lane (tests marked ``gpu``) compares with the CPU: cuda, or cpu for a dry run of
# the lane's code on a machine without a GPU (GSR_GPU_LANE=cpu pytest -m gpu)
GPU_LANE = os.environ.get("GSR_GPU_LANE", "cuda")


GPU_TEST_FILES = pytest.StashKey[set]()  # the files of the collected tests marked gpu (tests/test_gpu_lane_files.py)


def pytest_collection_modifyitems(config, items):
    """The GPU lane (``-m gpu``) runs where CUDA is visible and is skipped, with its reason, elsewhere."""
    import torch

    config.stash[GPU_TEST_FILES] = {item.path for item in items if "gpu" in item.keywords}
    if GPU_LANE != "cuda" or torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (the GPU lane; no CUDA device is visible here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# Modules whose module fixture costs a minute or more (a page's commands, a trained run): under
# ``pytest -n 2`` one worker runs all of their tests, so the fixture is made once, not once per worker.
ONE_WORKER = (
    "tests/test_plugin_retriever.py",
    "tests/test_plugin_reader.py",
    "tests/test_doc_trained_runs.py",
    "tests/test_gsr_retrieve.py",
    "tests/test_explore_page.py",
    "tests/test_explore_open_ended.py",
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``-n``'s scheduling (a test goes to whichever worker is free), except that the tests of a module
    in :data:`ONE_WORKER` go to one worker together (xdist's own ``loadgroup`` groups nothing under
    pytest 9). An explicit ``--dist`` other than ``load`` keeps xdist's scheduler."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerModules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER else nodeid

    return OneWorkerModules(config, log)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "webqsp_mini").exists():
        pytest.skip(f"real fixtures not found at {SHARED_DATA} (set GSR_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def webqsp_mini(shared_data) -> Path:
    return shared_data / "webqsp_mini"


@pytest.fixture(scope="session")
def user_cache(tmp_path_factory) -> Path:
    """One ``GSR_TRAIN_CACHE`` for the whole session, shared by every xdist worker: what a user's
    ``~/.cache/gsr_train`` is to the documented commands they run one after another (and at once).
    The tests that run docs pages as written take it, so webqsp_mini's MiniLM embeddings (about a
    minute and a half of CPU) and the quickstart's index are built once, not once per page; the
    cache's own file locks keep two workers from building the same table at once. Tests about
    building a cache (a first build, a damaged one, a lock) keep a fresh folder of their own."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the workers' folders share the session's parent
        root = root.parent
    folder = root / "user_cache"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture
def malloc_requests(monkeypatch) -> list[dict[int, int]]:
    """glibc's ``mallopt`` replaced by a recorder of `gsr_train.memory`'s requests (``{option: value}`` each,
    in order); the policy starts as a reader's training leaves it (freed memory returned to the OS)."""
    import gsr_train.memory as memory

    asked: list[dict[int, int]] = []
    monkeypatch.setattr(memory, "_mallopt", lambda settings: asked.append(dict(settings)) or True)
    monkeypatch.setattr(memory, "_policy", "return")
    monkeypatch.setattr(memory, "_kept", (0, 0, 0))
    return asked


@pytest.fixture
def cold_start(monkeypatch):
    """This test's commands each start in a fresh interpreter, as from a user's shell (not forked warm:
    ``tests/warm_python.py``): the getting-started walk-through keeps the suite's one fully cold path."""
    monkeypatch.setenv("GSR_TEST_COLD", "1")


def _environment_restored():
    """``os.environ`` as it was before the block, ``PYTEST_*`` (pytest's own) aside."""
    before = dict(os.environ)
    yield
    for key in [k for k in os.environ if k not in before and not k.startswith("PYTEST_")]:
        del os.environ[key]
    for key, value in before.items():
        if os.environ.get(key) != value and not key.startswith("PYTEST_"):
            os.environ[key] = value


@pytest.fixture(autouse=True)
def restore_environment():
    """What a test's in-process code put in ``os.environ`` is taken out after it, as ``monkeypatch`` does
    for what a test sets itself: a run called in-process sets the quiet flags of `gsr_train.runtime.quiet`
    (``TQDM_DISABLE``, ``TRANSFORMERS_VERBOSITY``, ...), torch's inductor a pointer. Left there, they were in
    the environment of every command the tests after it started, where a user's shell has none of them, and
    each new set started another warm server (one per environment, ``tests/warm_python.py``): 34 server
    starts of about 6 s in one run of the suite. ``PYTEST_*`` is pytest's own."""
    yield from _environment_restored()


@pytest.fixture(scope="module", autouse=True)
def restore_environment_after_the_module():
    """The same for a module's fixtures (set up before the first test's snapshot, so kept for the module)."""
    yield from _environment_restored()


@pytest.fixture(autouse=True)
def restore_torch_threads():
    """Runners set torch's thread count for their process (``*.threads`` configs); a test
    that calls one must not leave it changed for the tests after it."""
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models on a shared CPU: one torch thread is several times faster than two.

    Modules opt in with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def quiet(logger: str = "none") -> list[str]:
    """The overrides every toy run of the tests shares: no progress bar, no rich callback, ``logger``
    (``none``, or ``csv`` where a test reads the logged metrics)."""
    return [f"logger={logger}", "~callbacks.rich_progress", "trainer.enable_progress_bar=false"]


def compose_config(overrides, config_name="config", **kwargs):
    """The project's Hydra config (``conf/config.yaml``) with ``overrides``, as ``train.py`` builds it."""
    from hydra import compose, initialize_config_dir

    from gsr_train.config import register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides), **kwargs)


def offline_env(cache: str | os.PathLike | None = None, quiet: bool = False, **extra: str) -> dict[str, str]:
    """The environment of a subprocess run in the tests, written once: this one's, hub and wandb offline.

    ``cache``: ``GSR_TRAIN_CACHE``; ``quiet``: one thread and no Python warnings (toy runs on a shared CPU)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    if quiet:
        env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    if cache is not None:
        env["GSR_TRAIN_CACHE"] = str(cache)
    return {**env, **extra}


def load_script(path: Path, name: str | None = None):
    """A script of the checkout (``bench/``, ``data_prep/``) as a module, to call its functions: imported
    from its file under ``name`` (its stem), not run as ``__main__`` and not put in ``sys.modules``."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # its own folder first, as ``python bench/x.py`` has it (benchutil)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def run_train(args, cwd, env: dict, timeout: int = 300):
    """``python train.py ARGS`` in ``cwd`` with its output captured: how the tests start a real run."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def slurm_job(tmp_path: Path, job_id: str, name: str) -> tuple[dict[str, str], Path]:
    """A one-task SLURM job's environment (``SLURM_*``, and a recording ``scontrol`` first on ``PATH``)
    and the file each ``scontrol`` call is written to: what a requeued job sees, without SLURM."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol_calls"
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    one_task = dict.fromkeys(("SLURM_NTASKS", "SLURM_NNODES", "SLURM_NTASKS_PER_NODE"), "1")
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": job_id,
        "SLURM_JOB_NAME": name,
        **dict.fromkeys(("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID"), "0"),
        **one_task,
    }
    return env, calls


def can_mount_tmpfs() -> bool:
    """Whether a private mount namespace with a tiny tmpfs can be made here (the full-disk tests need one)."""
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=16k tmpfs /mnt"], capture_output=True, timeout=20
    )
    return probe.returncode == 0
