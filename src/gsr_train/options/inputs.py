"""The inputs every run reads, checked from the composed config alone and before anything heavy is
imported: the data folder and its splits' files, and a ``resume=<file>`` checkpoint.

`OptionErrors` (Hydra's callback, `gsr_train.options.command_line`) runs `check_inputs` right after
the option check, so a missing folder or file is one line in well under a second, before the run
folder is made; each runner's own check (`gsr_train.options.preflight.preflight`) runs the same
functions again with the splits, labels, checkpoints and encoder only it knows of."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from gsr_train.config import names_a_path
from gsr_train.data.errors import PreflightError
from gsr_train.runtime.run_folder import check_resume_target


def split_problems(cfg: DictConfig, splits: Sequence[str] = ()) -> Iterator[str]:
    """Splits the run reads that ``data.splits`` lacks, or whose files ``data.dir`` lacks."""
    configured = list(cfg.data.get("splits") or [])
    for split in dict.fromkeys(s for s in splits if s):
        if configured and split not in configured:
            yield f"split {split!r} is not in data.splits {configured}"
    data_dir = cfg.data.get("dir")
    if data_dir and Path(str(data_dir)).is_dir():
        from gsr_train.data.rows import split_files  # lazy: pyarrow (help and the option check need none)

        for split in dict.fromkeys(s for s in [*configured, *splits] if s):
            try:
                split_files(Path(str(data_dir)), split)
            except (FileNotFoundError, FileExistsError) as e:
                yield f"data.dir: {e}"
    elif data_dir and names_a_path(str(data_dir)) and not Path(str(data_dir)).exists():  # a file holds every split
        yield f"data.dir={data_dir} does not exist"


def resume_problems(cfg: Any, out: str | Path | None = None) -> list[str]:
    """``resume=<file>``: a checkpoint of the run folder ``out`` (default ``paths.output_dir``)."""
    try:
        check_resume_target(cfg, out)
    except PreflightError as e:
        return [str(e)]
    return []


def refuse(problems: Sequence[str]) -> None:
    """Every problem found, at once, in one `PreflightError` (none: nothing happens)."""
    if problems:
        raise PreflightError("cannot start the run:\n  - " + "\n  - ".join(problems))


def composed_problems(config: DictConfig, run_dir: str | None = None) -> list[str]:
    """The data folder's and its configured splits' problems of a config as composed (and, given the
    run folder ``run_dir``, a resume checkpoint's); none for a config without data, or whose values
    only a running job can read (its runner's own check then finds them)."""
    if "data" not in config:
        return []
    try:
        return [*split_problems(config), *(resume_problems(config, run_dir) if run_dir is not None else [])]
    except OmegaConfBaseException:  # an interpolation only a running job resolves
        return []


def check_inputs(config: DictConfig) -> None:
    """`composed_problems` of a Hydra config as composed (the run folder is still ``hydra.run.dir``),
    refused at once."""
    refuse(composed_problems(config, str(config.hydra.run.dir)))
