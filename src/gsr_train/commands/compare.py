"""``gsr-train compare RUN_A RUN_B``: the paired difference of two runs on the questions they share.

For every row the two runs have in common (same split and kind, `gsr_train.eval.compare`) and
every metric both measure: A's and B's figure, ``A - B`` with its 95% paired-bootstrap interval and a
paired permutation p-value, printed as one table and written as JSON (``--out``, default
``RUN_A/compare_<RUN_B's parent>_<RUN_B's folder>.json``: two B runs of one time stamp do not share it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from gsr_train.commands import run
from gsr_train.eval.schema import QUESTIONS_FILE, RESAMPLES, SEED
from gsr_train.io import write_json
from gsr_train.runtime.run_folder import unfinished


def _run_folder(path: str) -> Path:
    """A run folder with per-question values, or one line saying what the path is instead."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{path}: no such run folder")
    why = unfinished(folder, QUESTIONS_FILE)
    if why:
        raise FileNotFoundError(why)
    if not (folder / QUESTIONS_FILE).is_file():
        raise FileNotFoundError(
            f"{path}: no {QUESTIONS_FILE} (not a run folder, or one written before intervals existed: "
            "re-score it with `python eval.py ckpt_path=<run folder>`)"
        )
    return folder


def command(
    run_a: Annotated[str, typer.Argument(metavar="RUN_A", help="run folder (outputs/<experiment>/<time>)")],
    run_b: Annotated[str, typer.Argument(metavar="RUN_B", help="the run folder compared with it")],
    resamples: Annotated[
        int, typer.Option("--resamples", min=100, help="bootstrap resamples and permutations")
    ] = RESAMPLES,
    seed: Annotated[int, typer.Option("--seed", help="seed of the resampling")] = SEED,
    out: Annotated[
        str | None,
        typer.Option("--out", help="the JSON file (default RUN_A/compare_<RUN_B's parent>_<RUN_B's folder>.json)"),
    ] = None,
) -> int:
    """Two runs on the questions they share: A's and B's figures, A - B with its 95% paired-bootstrap
    interval and a paired permutation p-value, one table and a JSON file."""
    a, b = _run_folder(run_a), _run_folder(run_b)  # a wrong folder: one line before torch loads
    from gsr_train.eval.compare import compare_runs, compare_table  # lazy: torch (help needs none)

    doc = compare_runs(a, b, resamples, seed)
    print(compare_table(doc))
    b_path = b.resolve()
    written = Path(out) if out else a / f"compare_{b_path.parent.name}_{b_path.name}.json"
    write_json(written, doc)
    print(f"\nwrote {written}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(command, argv, "gsr-train compare")


if __name__ == "__main__":
    raise SystemExit(main())
