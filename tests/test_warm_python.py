"""The warm start of the tests' commands (``tests/warm_python.py``) runs a command as a fresh interpreter does."""

from __future__ import annotations

import gzip
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from . import warm_python
from .conftest import REPO, offline_env
from .subgraphrag_toy import toy_run_overrides

PROBE = """
import os, sys
import numpy
print("argv", sys.argv, "file", __file__, "name", __name__, "path0", sys.path[0], "cwd", os.getcwd())
print("env", os.environ.get("GSR_PROBE"), "spec", __spec__, "session leader", os.getsid(0) == os.getpid())
print("stdin", repr(sys.stdin.read()))
print("to stderr", file=sys.stderr)
if "boom" in sys.argv:
    raise ValueError("boom")
if "sleep" in sys.argv:
    print("sleeping", flush=True)
    __import__("time").sleep(60)
if "draw" in sys.argv:
    print("draw", numpy.random.rand())
sys.exit(int(sys.argv[1]) if sys.argv[1:] and sys.argv[1].isdigit() else 0)
"""


def _start(argv: list[str], how: str, **kwargs) -> subprocess.Popen:
    """``how``: ``cold`` (subprocess's own Popen: an exec'd interpreter) or ``warm`` (checked to be a fork)."""
    proc = (warm_python.WarmPopen if how == "warm" else warm_python._Original)(argv, **kwargs)
    assert (getattr(proc, "_warm", None) is not None) == (how == "warm"), how
    return proc


def _finish(argv: list[str], how: str, input: str | None = None, **kwargs) -> subprocess.CompletedProcess:
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if kwargs.pop("capture_output", False):
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with _start(argv, how, **kwargs) as proc:
        out, err = proc.communicate(input, timeout=300)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _both(argv: list[str], cwd: Path, **kwargs) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """The command run cold, then warm."""
    return _finish(argv, "cold", cwd=cwd, **kwargs), _finish(argv, "warm", cwd=cwd, **kwargs)


@pytest.fixture
def probe(tmp_path) -> Path:
    folder = tmp_path / "checkout"
    folder.mkdir()
    (folder / "train.py").write_text(PROBE)
    return folder


def test_a_script_sees_what_a_fresh_interpreter_sees(probe):
    """argv as given, the absolute ``__file__``, ``sys.path[0]``, the folder, the environment, stdin, the exit."""
    env = {**offline_env(), "GSR_PROBE": "here"}
    cold, warm = _both([sys.executable, "train.py", "3"], probe, env=env, capture_output=True, text=True, input="hi")
    assert cold.returncode == warm.returncode == 3
    assert cold.stdout == warm.stdout and cold.stderr == warm.stderr == "to stderr\n"
    assert f"argv ['train.py', '3'] file {probe}/train.py" in warm.stdout and "env here" in warm.stdout
    merged = _both([sys.executable, "train.py"], probe, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert merged[0].stdout == merged[1].stdout and "to stderr" in merged[1].stdout


def test_an_uncaught_exception_prints_the_commands_traceback(probe):
    cold, warm = _both([sys.executable, "train.py", "boom"], probe, capture_output=True, text=True)
    assert cold.returncode == warm.returncode == 1
    assert cold.stderr == warm.stderr and warm.stderr.splitlines()[2].startswith(f'  File "{probe}/train.py"')


def test_a_new_session_signals_and_timeouts(probe):
    """``start_new_session``, SIGTERM and kill -9 give Popen the statuses an exec'd child gives."""
    new = _both([sys.executable, "train.py"], probe, capture_output=True, text=True, start_new_session=True)
    assert new[0].stdout == new[1].stdout and "session leader True" in new[1].stdout
    for signum in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT):
        ends = []
        for how in ("cold", "warm"):
            proc = _start([sys.executable, "train.py", "sleep"], how, cwd=probe, stdout=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            while "sleeping" not in proc.stdout.readline():
                pass
            assert proc.poll() is None
            proc.send_signal(signum)
            ends.append(proc.wait(timeout=30))
            proc.stdout.close()
        assert ends[0] == ends[1] == -signum, (signum, ends)  # Ctrl-C: python's traceback, then death by SIGINT
    with pytest.raises(subprocess.TimeoutExpired):  # subprocess.run: the patched Popen, so warm
        subprocess.run([sys.executable, "train.py", "sleep"], cwd=probe, capture_output=True, timeout=3)


def test_each_command_draws_its_own_seed(probe):
    """Forks of one server would share numpy's global random state; each command reseeds it as a fresh one would."""
    draws = {
        subprocess.run([sys.executable, "train.py", "draw"], cwd=probe, capture_output=True, text=True).stdout.split(
            "draw"
        )[-1]
        for _ in range(3)
    }
    assert len(draws) == 3


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-X", "importtime", "train.py"],  # interpreter flags: measured, so cold
        [sys.executable, "-c", "print(1)"],
        [sys.executable, "train.py", "--help"],  # help's speed is tested
        [sys.executable, "-m", "pytest", "--version"],
        ["sh", "-c", "true"],
    ],
)
def test_what_it_does_not_take_starts_cold(probe, argv):
    with subprocess.Popen(argv, cwd=probe, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        assert proc._warm is None  # type: ignore[attr-defined]
        proc.wait(timeout=60)


def test_the_console_script_and_the_module_run_warm(tmp_path):
    """``gsr-train VERB`` (the venv's script) and ``python -m gsr_train.cli``: the same refusal, warm and cold."""
    script = Path(sys.executable).parent / "gsr-train"
    for argv in (
        [str(script), "score", str(tmp_path / "nowhere")],
        [sys.executable, "-m", "gsr_train.cli", "score", str(tmp_path / "nowhere")],
    ):
        cold, warm = _both(argv, tmp_path, capture_output=True, text=True)
        assert cold.returncode == warm.returncode == 2 and cold.stderr == warm.stderr, (cold.stderr, warm.stderr)


def test_the_checkouts_test_modules_run_warm_and_others_cold(probe, tmp_path):
    """``-m tests.signal_at`` (the kill tests' wrapper) runs warm where ``tests`` is this checkout's: the signal
    at the chosen call ends the command alike, warm and cold. A ``tests`` package of another folder starts cold."""
    import os

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "tests.signal_at", "numpy.random:rand", "1", "TERM", "train.py", "draw"]
    cold, warm = _both(argv, probe, env=env, input="", capture_output=True, text=True)
    assert cold.returncode == warm.returncode == -signal.SIGTERM, (cold.stderr[-2000:], warm.stderr[-2000:])
    assert cold.stdout.startswith("argv") and cold.stdout.count("\n") == warm.stdout.count("\n") == 3
    other = tmp_path / "other"
    (other / "tests").mkdir(parents=True)
    (other / "tests" / "signal_at.py").write_text("print('not the checkout')")
    assert warm_python.plan(argv, str(probe), env) is not None
    assert warm_python.plan(argv, str(other), env) is None  # the working folder's tests comes first
    assert warm_python.plan(argv, str(probe), {**env, "PYTHONPATH": ""}) is None  # no tests on the path


def _normal(text: str, root: Path) -> list[str]:
    """Log lines without what differs between two runs: the clock, durations, rates, the folder and its keys."""
    text = re.sub(r"\b[0-9a-f]{16,}\b", "KEY", text.replace(str(root), "ROOT"))  # cache keys hash the folder
    text = re.sub(r"\[\d{4}-\d\d-\d\d [\d:,]+\]", "[T]", text)
    text = re.sub(r"\d+(\.\d+)?(s|/s| s)\b", "N", re.sub(r"\d+:\d\d(:\d\d)?", "N", text))
    return text.splitlines()


def test_a_training_run_warm_is_the_cold_run(tmp_path):
    """The toy quickstart, cold and warm: the same log lines (Lightning's among them), weights, scores."""
    import torch

    runs = {}
    for how in ("cold", "warm"):
        root = tmp_path / how
        argv = [sys.executable, str(REPO / "train.py"), *toy_run_overrides(root)]
        kwargs = {"cwd": REPO, "env": offline_env(quiet=True), "capture_output": True, "text": True}
        done = _finish(argv, how, **kwargs)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[how] = (root, done)
    (cold_root, cold), (warm_root, warm) = runs["cold"], runs["warm"]
    assert _normal(cold.stdout, cold_root) == _normal(warm.stdout, warm_root)
    assert _normal(cold.stderr, cold_root) == _normal(warm.stderr, warm_root)
    assert "[pytorch_lightning." in warm.stdout + warm.stderr  # Lightning's logger as in a fresh run
    ckpt = [
        torch.load(next((r / "run" / "checkpoints").glob("best-*.ckpt")), weights_only=False)["state_dict"]
        for r in (cold_root, warm_root)
    ]
    assert ckpt[0].keys() == ckpt[1].keys() and all(torch.equal(ckpt[0][k], ckpt[1][k]) for k in ckpt[0])
    scores = [gzip.decompress((r / "run" / "results_test.jsonl.gz").read_bytes()) for r in (cold_root, warm_root)]
    assert scores[0] == scores[1]


def test_gsr_test_cold_starts_every_command_cold(probe, cold_start):
    with subprocess.Popen(
        [sys.executable, "train.py"], cwd=probe, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL
    ) as proc:
        assert proc._warm is None  # type: ignore[attr-defined]
        assert proc.wait(timeout=60) == 0


class _Alive:
    def poll(self) -> None:
        return None


def test_servers_started_before_site_packages_changed_are_stopped_first(monkeypatch):
    """A pip install since a server started (a plugin's) means its key never comes again: it is stopped as
    the next server starts, before any live one, instead of holding a place until it is the oldest."""
    stopped: list[str] = []
    installed = ["before"]
    monkeypatch.setattr(warm_python, "_stop", lambda entry: stopped.append(entry[1]))
    monkeypatch.setattr(warm_python, "MAX_SERVERS", 3)
    monkeypatch.setattr(warm_python, "env_key", lambda env: (installed[0], env["K"]))
    servers = warm_python._Servers()
    monkeypatch.setattr(servers, "_start", lambda env: (_Alive(), f"{installed[0]}-{env['K']}"))

    def use(k: str) -> None:
        address = servers.address({"K": k})
        assert address == f"{installed[0]}-{k}"
        servers.ended(address)

    try:
        use("a"), use("b")
        installed[0] = "after"  # pip installed a package: neither server can serve a command again
        use("a")
        assert stopped == ["before-a", "before-b"]
        use("b"), use("c")
        assert stopped == ["before-a", "before-b"]  # three live servers: within the limit
        use("a"), use("d")
        assert stopped[2:] == ["after-b"]  # past it: the least recently used goes
    finally:
        servers.by_key.clear()


def test_a_server_with_a_command_running_is_not_stopped(probe, monkeypatch):
    """Past MAX_SERVERS the least recently used idle server goes; one whose command still runs stays, so
    that command's status still reaches its Popen. Commands started at once from threads each get theirs."""
    import os
    import threading

    monkeypatch.setattr(warm_python, "MAX_SERVERS", 1)
    env = {**os.environ, "WARM_PROBE": "first"}
    first = subprocess.Popen(
        [sys.executable, "train.py", "sleep"], cwd=probe, env=env, stdout=subprocess.PIPE, text=True
    )
    assert first._warm is not None and first.stdout is not None  # type: ignore[attr-defined]
    while "sleeping" not in first.stdout.readline():
        pass
    other = {**os.environ, "WARM_PROBE": "second"}  # another environment: another server, past the limit
    codes: list[int] = []
    starts = [
        threading.Thread(
            target=lambda n=n: codes.append(
                subprocess.run(
                    [sys.executable, "train.py", str(n)], cwd=probe, env=other, capture_output=True
                ).returncode
            )
        )
        for n in (4, 5, 6)
    ]
    for thread in starts:
        thread.start()
    for thread in starts:
        thread.join(timeout=120)
    assert sorted(codes) == [4, 5, 6]
    assert first.poll() is None
    first.terminate()
    assert first.wait(timeout=30) == -signal.SIGTERM
    first.stdout.close()


def test_the_servers_imports_print_and_warn_nothing():
    """A command's fresh interpreter prints what its own imports print; a server's imports are done before the
    command starts, so they must print nothing, warnings shown (peft's bitsandbytes prints, PyG warns)."""
    imports = "; ".join(f"import {name}" for name in warm_python.PRELOAD)
    done = subprocess.run([sys.executable, "-W", "always", "-c", imports], capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_package_installed_since_is_a_new_server(tmp_path, monkeypatch):
    """A server started before ``pip install`` has the old site-packages on its path: the key moves with it."""
    import os
    import site

    folder = tmp_path / "site-packages"
    folder.mkdir()
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(folder)])
    before = warm_python.env_key(offline_env())
    (folder / "plugin.pth").write_text(str(tmp_path))
    os.utime(folder, ns=(0, os.stat(folder).st_mtime_ns + 1))
    assert warm_python.env_key(offline_env()) != before
