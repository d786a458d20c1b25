"""A command's process skips the interpreter's last garbage collection (`gsr_train.runtime.shutdown`):
every entry point installs it, and it is what keeps that pass from running."""

from __future__ import annotations

import atexit
import gc
import subprocess
import sys

import pytest

from gsr_train.runtime import shutdown

from .conftest import REPO

# an object in a reference cycle: only a garbage collection finds it, and its __del__ says so
CYCLE = """
class Loop:
    def __del__(self):
        print("collected", flush=True)
loop = Loop(); loop.me = loop; del loop
"""


@pytest.mark.parametrize("installed", [False, True])
def test_the_last_collection_is_skipped_once_installed(installed):
    setup = "from gsr_train.runtime import shutdown; shutdown.install()\n" if installed else ""
    done = subprocess.run([sys.executable, "-c", setup + CYCLE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert ("collected" in done.stdout) is not installed  # Python's own exit collects the cycle; ours does not


@pytest.fixture
def registered(monkeypatch) -> list:
    """The exit hooks registered from here on (none really registered), with `shutdown` not yet installed."""
    hooks: list = []
    monkeypatch.setattr(shutdown, "_INSTALLED", [])
    monkeypatch.setattr(atexit, "register", lambda fn, *a, **k: hooks.append(fn) or fn)
    return hooks


def test_gsr_train_installs_it(registered):
    from gsr_train.cli import main

    assert main(["--help"]) == 0
    assert gc.freeze in registered


def test_the_module_form_of_a_verb_installs_it(registered):
    from gsr_train import commands

    def verb() -> int:
        return 0

    commands.run(verb, [], "gsr-train nothing")
    assert gc.freeze in registered


def test_train_and_eval_install_it(registered):
    from gsr_train.options.command_line import run_hydra

    assert run_hydra(lambda: 7, REPO / "conf", "config", []) == 7  # train.py's and eval.py's entry
    assert gc.freeze in registered
    assert registered.count(gc.freeze) == 1
    shutdown.install()  # again: nothing more
    assert registered.count(gc.freeze) == 1
