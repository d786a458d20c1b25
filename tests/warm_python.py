"""The commands the tests start, from an interpreter that has already imported torch (a fork server).

Most of the suite's time is the documented commands it runs as written (``python train.py ...``,
``python eval.py ...``, ``gsr-train VERB``), and each one spends about four seconds of its CPU
importing torch and torchmetrics before it reads its first option. Here one server process per
xdist worker (and per environment) imports them once; each command is then a fork of it that
takes the command's own argv, working folder, environment and stdin / stdout / stderr, and runs the
script as ``python SCRIPT`` would (``runpy``, ``__main__``, ``sys.path[0]``, the exit status, an
uncaught exception's traceback). Lightning and the project are imported by the command itself, as
in a fresh interpreter, so what depends on import order (Lightning's logger joins the root handlers
Hydra set up) is as a user sees it.

:class:`WarmPopen` is ``subprocess.Popen`` with that start; the conftest puts it in ``subprocess``
for the whole session. It takes only what it can run faithfully: this interpreter, without flags,
on ``train.py`` / ``eval.py`` / a script of the checkout's ``bench/``, ``tools/`` or ``tests/``,
``-m gsr_train...``, ``-m tests.X`` (the checkout's: ``tests.signal_at``) or the ``gsr-train`` script,
and no ``--help`` (whose speed tests measure); anything else (``python -X importtime``, ``-c``, a shell,
``preexec_fn``, pytest, pip) starts cold, as does every command when ``GSR_TEST_COLD=1``.
``tests/test_warm_python.py`` compares the two.

The server freezes what its imports made (``gc.freeze()``, as CPython's docs advise for a server that
forks): a command's garbage collections skip those objects instead of walking them and so touching every
page of the 600 MB the fork shares. Two doc tests' commands (sweeps, Ctrl-C and resume) took 8-15% less
CPU in four alternating pairs (64.1 s against 69.6 s, 57.7 against 66.4), and 5% fewer page faults.

Popen's returncode, ``wait(timeout)``, ``kill``/``send_signal`` and pipes work as usual: the pid is
the command's own, and the server sends its wait status back.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from collections import OrderedDict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# imported by the server: none has an import-time effect that depends on state (Lightning's logger does: it
# checks the root handlers; PyG's torch.jit.script calls set MKL up before gsr_train pins its numerics, which
# tests/test_numerics.py sees), and none prints or warns at import, even under ``-W always`` (peft's bitsandbytes
# prints, PyG warns: a command that never imports them would not), which tests/test_warm_python.py checks
PRELOAD = (
    "numpy", "torch", "torch._dynamo", "torchmetrics", "pandas", "pyarrow.parquet", "pyarrow.compute",
    "pyarrow.dataset", "numba", "omegaconf", "hydra", "hydra.utils", "pydantic", "httpx", "datasets",
    "faiss", "typer",
)  # fmt: skip
# read by the command (or Lightning, wandb, CUDA) when it runs, not by PRELOAD's imports; in-process runs of
# the tests leave some of them in the test process's environment (the seed, a DDP port, wandb's service)
RUNTIME_ONLY = ("GSR_", "SLURM_", "PYTEST_", "PATH", "PL_", "MASTER_", "WANDB_", "CUBLAS_WORKSPACE_CONFIG")
SCRIPTS = ("train.py", "eval.py")
SCRIPT_FOLDERS = ("bench", "tools", "tests", "data_prep")
COLD_ARGS = ("--help", "-h")
# per xdist worker: the numerics tests' instruction-set environments (three at once) beside the usual two
# (one thread and warnings off, or not) are five; 580 MB each, idle
MAX_SERVERS = 6
_Original = subprocess.Popen


# ----------------------------------------------------------------------------- which commands


def _which(name: str, cwd: str | None, env: dict) -> str | None:
    if "/" in name:
        return os.path.abspath(os.path.join(cwd or os.getcwd(), name))
    for folder in env.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _this_python(path: str) -> bool:
    """Whether ``path`` starts this interpreter in this environment (the same venv, so the same sys.prefix)."""
    try:
        same = os.path.samefile(path, sys.executable)
    except OSError:
        return False
    return same and os.path.realpath(Path(path).parent.parent) == os.path.realpath(sys.prefix)


def _shebang(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    return first[2:].strip().decode(errors="replace") if first.startswith(b"#!") else None


def _ours(script: str) -> bool:
    path = Path(script)
    folder = path.resolve().parent
    return path.name in (*SCRIPTS, "gsr-train") or (folder.parent == REPO and folder.name in SCRIPT_FOLDERS)


def _our_module(name: str, here: str, env: dict) -> bool:
    """Whether ``-m name`` runs a module of the project: ``gsr_train...``, or ``tests.X`` (``tests.signal_at``)
    when the ``tests`` a fresh interpreter would import (the first on its path: the working folder, then
    PYTHONPATH) is this checkout's."""
    top, _, rest = name.partition(".")
    if top == "gsr_train":
        return True
    if top != "tests" or not rest or not (REPO / "tests" / (rest.replace(".", "/") + ".py")).is_file():
        return False
    for folder in (here, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))):
        found = os.path.join(folder, "tests")
        if os.path.isdir(found):
            return os.path.realpath(found) == str((REPO / "tests").resolve())
    return False


def plan(args: list[str], cwd: str | None, env: dict) -> dict | None:
    """How ``args`` runs warm (the script or module, sys.argv, sys.path[0]), or None: it starts cold."""
    if not args or any(a in COLD_ARGS for a in args[1:]):
        return None
    exe = _which(args[0], cwd, env)
    if exe is None:
        return None
    here = os.path.abspath(cwd or os.getcwd())
    if not _this_python(exe):  # a console script: its own file, run by this python
        python = _shebang(exe)
        if python is None or not _this_python(python) or not _ours(exe):
            return None
        return {"script": exe, "argv": [exe, *args[1:]], "path0": os.path.dirname(os.path.realpath(exe))}
    rest = args[1:]
    if len(rest) >= 2 and rest[0] == "-m" and _our_module(rest[1], here, env):
        return {"module": rest[1], "argv": ["-m", *rest[2:]], "path0": here}
    if rest and not rest[0].startswith("-") and rest[0].endswith(".py") and _ours(rest[0]):
        script = os.path.join(here, rest[0])
        if os.path.isfile(script):
            return {"script": script, "argv": rest, "path0": os.path.dirname(os.path.realpath(script))}
    return None


def env_key(env: dict) -> tuple:
    """What a server's start may have read: the environment, less what commands read only when they run,
    and site-packages as it was (a package pip installed since, a plugin's ``.pth`` among them, is on a
    fresh interpreter's path but not on an older server's: its folder's mtime moves)."""
    import site

    folders = [*site.getsitepackages(), site.getusersitepackages()]
    installed = tuple(os.stat(f).st_mtime_ns if os.path.isdir(f) else 0 for f in folders)
    return (installed, *sorted((k, v) for k, v in env.items() if not k.startswith(RUNTIME_ONLY)))


# ----------------------------------------------------------------------------- the client side


class _Servers:
    """This process's servers, one per :func:`env_key`, started on first use and stopped at exit; at most
    :data:`MAX_SERVERS` at once (each holds torch's few hundred MB): those started before site-packages last
    changed are stopped first (their key can never come again), then the least recently used."""

    def __init__(self) -> None:
        self.by_key: OrderedDict[tuple, tuple[subprocess.Popen, str] | None] = OrderedDict()
        self.owner, self.lock = os.getpid(), threading.Lock()
        self.running: dict[str, int] = {}  # address -> its commands not yet ended
        atexit.register(self.stop)

    def address(self, env: dict) -> str | None:
        if os.getpid() != self.owner:  # a fork of the test process starts its commands cold
            return None
        key = env_key(env)
        with self.lock:
            if key not in self.by_key:
                idle = [k for k, entry in self.by_key.items() if entry is None or not self.running.get(entry[1])]
                stale = [k for k in idle if k[0] != key[0]]  # site-packages has changed since: never used again
                fresh = [k for k in idle if k[0] == key[0]]  # the least recently used first
                over = max(0, len(self.by_key) - len(stale) + 1 - MAX_SERVERS)
                for old in stale + fresh[:over]:  # one with a command running stays
                    _stop(self.by_key.pop(old))
                self.by_key[key] = self._start(env)
            self.by_key.move_to_end(key)
            entry = self.by_key[key]
            if entry is None or entry[0].poll() is not None:
                return None
            self.running[entry[1]] = self.running.get(entry[1], 0) + 1  # until ended(): not stopped under it
            return entry[1]

    def _start(self, env: dict) -> tuple[subprocess.Popen, str] | None:
        address = os.path.join(tempfile.mkdtemp(prefix="gsr-warm-"), "s")
        with open(address + ".log", "wb") as log:  # the server's own errors, for whoever debugs it
            server = _Original(
                [sys.executable, __file__, address],
                env={k: v for k, v in env.items() if not k.startswith(RUNTIME_ONLY) or k == "PATH"},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=REPO,
            )
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 300)
        if not ready or server.stdout.readline() != b"ready\n":
            _stop((server, address))
            return None
        return server, address

    def ended(self, address: str) -> None:
        with self.lock:
            self.running[address] -= 1

    def stop(self) -> None:
        if os.getpid() == self.owner:
            for entry in self.by_key.values():
                _stop(entry)


def _stop(entry: tuple[subprocess.Popen, str] | None) -> None:
    """A server killed (the commands it started run on: they are their own processes)."""
    if entry is not None:
        if entry[0].poll() is None:
            entry[0].kill()
            entry[0].wait()
        shutil.rmtree(os.path.dirname(entry[1]), ignore_errors=True)


_SERVERS: _Servers | None = None


def _servers() -> _Servers:
    global _SERVERS
    if _SERVERS is None:
        _SERVERS = _Servers()
    return _SERVERS


class WarmPopen(subprocess.Popen):
    """``subprocess.Popen``; a command :func:`plan` takes is forked from a warm server instead of exec'd."""

    _warm: socket.socket | None = None
    _address = ""

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, *rest):  # type: ignore[override]
        (startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite) = rest[:9]
        restore_signals, gid, gids, uid, umask, start_new_session, process_group = rest[9:]
        environ = {os.fsdecode(k): os.fsdecode(v) for k, v in (os.environ if env is None else env).items()}
        argv = [os.fsdecode(a) for a in args] if isinstance(args, list | tuple) else None
        folder = os.fsdecode(cwd) if cwd is not None else None
        simple = not shell and executable is None and preexec_fn is None and not pass_fds
        simple = simple and (gid, gids, uid, umask, process_group) == (None, None, None, -1, -1)
        how = plan(argv, folder, environ) if simple and argv and not os.environ.get("GSR_TEST_COLD") else None
        address = _servers().address(environ) if how else None
        if address is None:
            return super()._execute_child(args, executable, preexec_fn, close_fds, pass_fds, cwd, env, *rest)
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1, errwrite if errwrite != -1 else 2]
        here = os.path.abspath(folder or os.getcwd())
        request = {**how, "cwd": here, "env": environ, "new_session": start_new_session}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(address)
            socket.send_fds(conn, [json.dumps(request).encode()], fds)
            reply = conn.recv(4096)
            if not reply:
                raise OSError(f"the warm server at {address} closed the connection (see {address}.log)")
        except BaseException:
            conn.close()
            _servers().ended(address)
            raise
        self.pid, self._warm, self._address = json.loads(reply)["pid"], conn, address
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _status(self, block: bool) -> int | None:
        assert self._warm is not None
        if not block and not select.select([self._warm], [], [], 0)[0]:
            return None
        data = self._warm.recv(4096)
        self._warm.close()
        _servers().ended(self._address)
        if not data:
            raise OSError(f"the warm server at {self._address} ended before pid {self.pid} (see {self._address}.log)")
        return json.loads(data)["status"]

    def _try_wait(self, wait_flags):  # type: ignore[override]
        if self._warm is None:
            return super()._try_wait(wait_flags)
        status = self._status(block=not wait_flags & os.WNOHANG)
        return (0, 0) if status is None else (self.pid, status)

    def _internal_poll(self, _deadstate=None, **kwargs):  # type: ignore[override]
        if self._warm is None or self.returncode is not None:
            return super()._internal_poll(_deadstate=_deadstate, **kwargs)
        if not self._waitpid_lock.acquire(False):
            return None
        try:
            status = self._status(block=False)
            if status is not None:
                self._handle_exitstatus(status)
        except OSError:
            if _deadstate is not None:
                self.returncode = _deadstate
        finally:
            self._waitpid_lock.release()
        return self.returncode


# ----------------------------------------------------------------------------- the server side


def serve(address: str) -> None:
    """Import :data:`PRELOAD`, then fork one child per request; send each its wait status when it ends."""
    del sys.path[0]  # the tests folder is not on a command's path
    for name in PRELOAD:
        importlib.import_module(name)
    # what the imports made is never garbage: frozen, no command's collection walks it (and so writes to
    # its pages, which a fork then copies): 8-15% less CPU a command (tests/warm_python.py's docstring)
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    parent, waiting = os.getppid(), {}
    print("ready", flush=True)
    while os.getppid() == parent:
        ready, _, _ = select.select([listener, wake_r], [], [], 1.0)
        if wake_r in ready:
            os.read(wake_r, 4096)
        if listener in ready:
            conn, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            pid = os.fork()
            if pid == 0:
                for sock in (listener, *waiting.values()):
                    sock.close()
                os.close(wake_r)
                os.close(wake_w)
                _run_child(json.loads(message), fds, conn)  # never returns
            for fd in fds:
                os.close(fd)
            waiting[pid] = conn
            conn.send(json.dumps({"pid": pid}).encode())
        _reap(waiting)


def _reap(waiting: dict) -> None:
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            try:
                conn.send(json.dumps({"status": status}).encode())
            except OSError:
                pass  # the test that started it has gone
            conn.close()


def _run_child(request: dict, fds: list[int], conn: socket.socket) -> None:
    """Become the command: its stdio, session, folder, environment, argv and path; then run it as python would."""
    import runpy

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    conn.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    if request["new_session"]:
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    sys.path.insert(0, request["path0"])
    if "numpy.random" in sys.modules:  # a fresh interpreter's numpy draws a fresh seed
        sys.modules["numpy.random"].seed()
    restart = getattr(sys.modules.get("sitecustomize"), "gsr_suite_restart", None)
    if restart is not None:  # bench/bench_suite.py's process recorder: this is a command of its own
        restart()
    try:
        if "module" in request:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:
            _run_script(request["script"])
    except SystemExit:
        raise
    except KeyboardInterrupt:  # python's own end: the traceback, then death by SIGINT
        traceback.print_exc()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException as error:
        _print_command_traceback(error, request)
        raise SystemExit(1) from None
    raise SystemExit(0)


def _run_script(script: str) -> None:
    """``python SCRIPT``'s run: a fresh ``__main__`` with the absolute ``__file__``, argv as given."""
    import builtins
    import importlib.machinery
    import types

    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", script)
    main.__spec__ = None
    main.__cached__ = None  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    with open(script, "rb") as f:
        code = compile(f.read(), script, "exec")
    exec(code, main.__dict__)


def _print_command_traceback(error: BaseException, request: dict) -> None:
    """The traceback python prints, from the command's first frame (this server's and runpy's left out)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    first = request.get("script")
    start = tb
    while start is not None and first is not None and start.tb_frame.f_code.co_filename != first:
        start = start.tb_next
    tb = start if start is not None else tb
    sys.excepthook(type(error), error.with_traceback(tb), tb)


if __name__ == "__main__":
    serve(sys.argv[1])
