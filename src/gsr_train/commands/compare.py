"""``gsr-train compare RUN_A RUN_B``: the paired difference of two runs on the questions they share.

For every row the two runs have in common (same split and kind, :mod:`gsr_train.eval.compare`) and
every metric both measure: A's and B's figure, ``A - B`` with its 95% paired-bootstrap interval and a
paired permutation p-value, printed as one table and written as JSON (``--out``, default
``RUN_A/compare_<RUN_B's folder>.json``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from gsr_train.eval.compare import compare_runs, compare_table
from gsr_train.eval.intervals import RESAMPLES, SEED
from gsr_train.eval.tail import QUESTIONS_FILE
from gsr_train.io import write_json


def _run_folder(path: str) -> Path:
    """A run folder with per-question values, or one line saying what the path is instead."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{path}: no such run folder")
    if not (folder / QUESTIONS_FILE).is_file():
        raise FileNotFoundError(
            f"{path}: no {QUESTIONS_FILE} (not a run folder, or one written before intervals existed: "
            "re-score it with `python eval.py ckpt_path=<run folder>`)"
        )
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gsr-train compare", description=__doc__.splitlines()[0])
    p.add_argument("run_a", metavar="RUN_A", help="run folder (outputs/<experiment>/<time>)")
    p.add_argument("run_b", metavar="RUN_B", help="the run folder compared with it")
    p.add_argument(
        "--resamples", type=int, default=RESAMPLES, help=f"bootstrap resamples and permutations ({RESAMPLES})"
    )
    p.add_argument("--seed", type=int, default=SEED, help=f"seed of the resampling ({SEED})")
    p.add_argument("--out", default=None, help="the JSON file (default RUN_A/compare_<RUN_B's folder name>.json)")
    args = p.parse_args(argv)
    if args.resamples < 100:
        raise ValueError(f"--resamples={args.resamples}: expected at least 100")
    a, b = _run_folder(args.run_a), _run_folder(args.run_b)
    doc = compare_runs(a, b, args.resamples, args.seed)
    print(compare_table(doc))
    out = Path(args.out) if args.out else a / f"compare_{b.resolve().name}.json"
    write_json(out, doc)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
