"""Fifteen commands a user gets wrong (bad options, missing files, an unknown experiment, eval.py
mistakes): each is refused with exit status 2, and none may leave a folder behind.

``python tests/refused_commands.py [REPO]`` runs them from an empty working directory against the
checkout ``REPO`` (default: this one) and prints, for each, its exit status, its message and the
folders it left; the last line is the total. ``tests/test_refused_commands.py`` runs the same list.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SG = "+experiment=subgraphrag_quickstart"

# what refusing a command must not import: seconds of start-up before one line
HEAVY = ("torch", "pytorch_lightning", "lightning", "lightning_fabric", "transformers", "torch_geometric")
IMPORT_TIME = "import time:"  # the lines python -X importtime writes to stderr

# (script, arguments); {tmp} is the working directory, which holds an empty folder ``empty/``
COMMANDS: list[tuple[str, list[str]]] = [
    ("train.py", []),  # no experiment
    ("train.py", ["+experiment=nosuch"]),  # an unknown experiment
    ("train.py", [SG, "model.hiden=64"]),  # a misspelled option
    ("train.py", [SG, "data=nosuch"]),  # a group option that does not exist
    ("train.py", [SG, "eval_ks=[10,"]),  # an override Hydra cannot parse
    ("train.py", [SG, "top_k=ten"]),  # a wrong type
    ("train.py", ["+experiment=gsr_quickstart", "gsr.decod=3"]),
    ("train.py", [SG, "data.dir={tmp}/no_such_data"]),  # a missing data folder
    ("train.py", [SG, "data.dir={tmp}/empty"]),  # a data folder without splits
    ("train.py", [SG, "resume={tmp}/gone/last.ckpt"]),  # a missing checkpoint
    ("eval.py", []),  # no ckpt_path
    ("eval.py", ["ckpt_path={tmp}/nope.ckpt"]),  # a missing checkpoint
    ("eval.py", ["ckpt_path={tmp}/empty"]),  # a folder that holds no run
    ("eval.py", ["ckpt_path=x", "data=nosuch"]),
    ("eval.py", ["+experiment=cosine_baseline", "data.dir={tmp}/no_such_data"]),
]


def folders(root: Path) -> list[str]:
    """The folders a command may leave in ``root``: run and sweep folders (``outputs/<name>/<time>``,
    ``multirun/<name>/<time>``) and any other new folder at the top, as paths relative to ``root``."""
    found = []
    for p in root.iterdir():
        if not p.is_dir() or p.name in ("empty", "cache"):
            continue
        if p.name in ("outputs", "multirun"):
            found += [str(run.relative_to(root)) for exp in p.iterdir() for run in exp.iterdir()] or [p.name]
        else:
            found.append(p.name)
    return sorted(found)


def run_refused(repo: Path, script: str, args: list[str], cwd: Path) -> tuple[int, str, list[str], list[str]]:
    """Run one command in ``cwd`` (under ``python -X importtime``): its exit status, the last line of its
    stderr, the folders it left and the packages of `HEAVY` it imported to refuse."""
    before = set(folders(cwd))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "GSR_TRAIN_CACHE": str(cwd / "cache"),
        "PYTHONPATH": os.pathsep.join([str(repo / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [sys.executable, "-X", "importtime", str(repo / script), *(a.format(tmp=cwd) for a in args)]
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith(IMPORT_TIME)]
    timed = [line for line in proc.stderr.splitlines() if line.startswith(IMPORT_TIME)]
    heavy = sorted({line.rsplit("|", 1)[1].strip().split(".", 1)[0] for line in timed} & set(HEAVY))
    return proc.returncode, lines[-1] if lines else "", [f for f in folders(cwd) if f not in before], heavy


def main(argv: list[str]) -> int:
    repo = Path(argv[0]).resolve() if argv else REPO
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "empty").mkdir()
        for script, args in COMMANDS:
            code, message, left, heavy = run_refused(repo, script, args, cwd)
            total += len(left)
            print(f"{code}  {script} {' '.join(args)}\n   {message[:150]}\n   left: {left or 'nothing'}")
            print(f"   imported: {', '.join(heavy) or 'nothing heavy'}")
    print(f"{len(COMMANDS)} refused commands left {total} run folders")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
