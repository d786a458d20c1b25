"""Hydra / OmegaConf glue: resolvers that make configs independent of the working directory."""

from __future__ import annotations

import copy
import json
import os
from dataclasses import asdict, field, is_dataclass
from pathlib import Path
from typing import Any, cast

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf


def project_root() -> Path:
    """The source checkout (where ``conf/`` and ``train.py`` live), or the working directory."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "conf" / "config.yaml").exists() and (parent / "train.py").exists():
            return parent
    return Path.cwd()


def shared_data_dir() -> Path:
    """Where the real fixtures live: ``$GSR_SHARED_DATA`` or ``../shared/data`` next to the checkout."""
    env = os.environ.get("GSR_SHARED_DATA")
    return Path(env) if env else project_root().parent / "shared" / "data"


def default_cache_dir() -> Path:
    """``$GSR_TRAIN_CACHE`` or ``~/.cache/gsr_train``: one cache for the CLI tools and train.py."""
    return Path(os.environ.get("GSR_TRAIN_CACHE", Path.home() / ".cache" / "gsr_train"))


RUN_MARKER = "run.json"
DEFAULT_MAX_CHAINS = 64  # distinct shortest-path relation chains kept per question (kg.paths)


def run_state(folder: str | Path) -> dict | None:
    """The ``run.json`` of a run folder (``status``: running, interrupted, failed, finished), or None."""
    try:
        state = json.loads((Path(folder) / RUN_MARKER).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def slurm_job_tag() -> str | None:
    """``<job id>`` (``<array job>_<task>`` for arrays) of the SLURM batch job this process runs in,
    or None outside SLURM and in interactive allocations (Lightning's rule: job name bash / interactive)."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job or "SLURM_NTASKS" not in os.environ:
        return None
    if os.environ.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return None
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    return f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array and os.environ.get("SLURM_ARRAY_TASK_ID") else job


def _candidates(base: str):
    """The folder names a run of ``base`` may take, in order (see `claim_run_dir`)."""
    path = Path(base)
    job = slurm_job_tag()
    if job is not None:
        path = path.with_name(f"slurm-{job}")
    for n in range(10_000):
        yield path if n == 0 else path.with_name(f"{path.name}_{n}"), job is not None
    raise RuntimeError(f"no free run folder next to {base}")


def claim_run_dir(base: str) -> str:
    """A new, empty run folder named ``base`` (or ``base_1``, ``base_2``, ... when taken), made now.

    ``os.mkdir`` either creates the folder or fails, so two runs started in the same second
    (the folder names carry seconds) never share one. Called once per run, when its work starts
    (`gsr_train.runtime.run_folder.RunFolderGuard`, after the option checks).

    In a SLURM batch job the folder is ``slurm-<job id>`` next to ``base`` instead: every task of
    the job (one per GPU) and every requeued attempt of it compute the same folder, so a job
    requeued after preemption or a time limit continues where it stopped. The first such folder
    that does not hold a finished run is taken (a second run of the same experiment in one job
    script gets ``slurm-<job id>_1``).
    """
    Path(base).parent.mkdir(parents=True, exist_ok=True)
    for candidate, slurm in _candidates(base):
        if slurm:
            if (run_state(candidate) or {}).get("status") != "finished":
                candidate.mkdir(exist_ok=True)
                return str(candidate)
            continue
        try:
            os.mkdir(candidate)
            return str(candidate)
        except FileExistsError:
            continue
    raise AssertionError("unreachable")  # _candidates raises when it runs out


PROPOSED_RUN_DIRS: dict[str, str] = {}  # the ${new_run_dir:...} names of this process: name -> base


def propose_run_dir(base: str) -> str:
    """The ``${new_run_dir:base}`` resolver: the folder `claim_run_dir` would take now, made
    nowhere. Resolving a config (composing it again for a message, --help, eval.py reading a run's
    saved config) creates no folder; the run claims its folder once, when its work starts."""
    for name, known in PROPOSED_RUN_DIRS.items():
        if known == base:
            return name
    for candidate, slurm in _candidates(base):
        taken = (run_state(candidate) or {}).get("status") == "finished" if slurm else candidate.exists()
        if not taken:
            PROPOSED_RUN_DIRS[str(candidate)] = base
            return str(candidate)
    raise AssertionError("unreachable")


def experiment_choice(*, _root_: Any = None) -> str | None:
    """The experiment picked with ``+experiment=NAME`` (None without one).

    Read from the composed config's own ``hydra.runtime.choices`` while Hydra has not set its
    global config yet (the sweeper naming the sweep folder, Hydra callbacks before a run), from
    Hydra's global config inside the job (whose config no longer has a ``hydra`` node)."""
    if _root_ is not None:
        choice = OmegaConf.select(_root_, "hydra.runtime.choices.experiment", default=None)
        if choice is not None:
            return str(choice)
    if HydraConfig.initialized():
        choice = HydraConfig.get().runtime.choices.get("experiment")
        return None if choice is None else str(choice)
    return None


GENERIC_FOLDER_NAMES = {"data", "splits", "rog", "dataset", "datasets"}


def dataset_name(preset: str, data_dir: str | None = None, preset_dir: str | None = None) -> str:
    """The name results and model cards carry: the preset's name while the preset's data is
    used, otherwise a name from the folder (or hub id) actually read, so a ``data.dir``
    override is never reported under the preset's name. ``data.name=...`` overrides it."""
    if not data_dir or str(data_dir) in ("None", "null") or (preset_dir and str(data_dir) == str(preset_dir)):
        return preset
    path = Path(str(data_dir).rstrip("/"))
    if path.name.lower() in GENERIC_FOLDER_NAMES and path.parent.name:
        return path.parent.name
    return path.name or str(data_dir)


def names_a_path(source: str | Path) -> bool:
    """Whether a data source is written as a local path (``/...``, ``./...``, ``~/...``, or a name with
    a suffix) rather than a Hugging Face dataset name (``rmanluo/RoG-webqsp``)."""
    text = str(source)
    return text.startswith(("/", ".", "~")) or bool(Path(text).suffix)


def register_resolvers() -> None:
    for name, fn in {
        "project_root": lambda: str(project_root()),
        "shared_data": lambda: str(shared_data_dir()),
        "default_cache": lambda: str(default_cache_dir()),
    }.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    if not OmegaConf.has_resolver("dataset_name"):
        OmegaConf.register_new_resolver("dataset_name", dataset_name)
    if not OmegaConf.has_resolver("new_run_dir"):
        OmegaConf.register_new_resolver("new_run_dir", propose_run_dir)
    if not OmegaConf.has_resolver("experiment_choice"):
        OmegaConf.register_new_resolver("experiment_choice", experiment_choice)


def plain(node: Any) -> Any:
    """A config node (mapping or list) as plain, resolved Python; any other value as it is: an option
    that may come from a composed config or from a caller's own dict reads the same."""
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) else node


def as_dict(cfg: Any, *, resolve: bool = True) -> dict[str, Any]:
    """``OmegaConf.to_container(cfg, resolve=resolve)`` of a mapping node, typed as the plain dict it is.

    Like ``to_container``, a value that is no OmegaConf config is a ValueError; a config that is
    no mapping (a list node) is a TypeError."""
    data = OmegaConf.to_container(cfg, resolve=resolve)
    if not isinstance(data, dict):
        raise TypeError(f"expected a mapping config node, got {type(data).__name__}")
    return cast(dict[str, Any], data)  # config keys are strings


def dataclass_from_mapping(cls, cfg, label: str, positive: tuple[str, ...] = ()):
    """``cls(**cfg)`` for a config section, refusing unknown keys and non-positive ``positive`` fields.

    ``cfg`` may already be a ``cls`` instance or ``None`` (defaults). Errors name the section.
    """
    if cfg is None or isinstance(cfg, cls):
        return cfg or cls()
    names = set(cls.__dataclass_fields__)
    unknown = sorted(set(cfg) - names)
    if unknown:
        raise ValueError(f"{label} config: unknown keys {unknown} (known: {sorted(names)})")
    out = cls(**dict(cfg))
    for name in positive:
        if int(getattr(out, name)) < 1:
            raise ValueError(f"{label} config: {name} must be >= 1, got {getattr(out, name)}")
    return out


# ---------------------------------------------------------------- typed option fields
# Every option of a runner is a field of a typed dataclass (gsr_train.options.recipes and the option
# classes of the lower layers), declared with ``option``: its default, a one-line description and
# its range. gsr_train.options checks a composed config against them before any work (pydantic
# reads the range from the field's metadata) and prints them (gsr-train options NAME).
OPTION_RANGES = ("ge", "gt", "le", "lt", "min_length", "max_length", "strict")


def option(default: Any, description: str, **constraints: Any) -> Any:
    """A dataclass field: its ``default`` (a list, dict or dataclass instance is copied per
    instance), a one-line ``description`` and its range in pydantic's words (``ge``, ``gt``,
    ``le``, ``min_length``, ...). A closed set of values is a ``Literal`` type, not a range."""
    unknown = set(constraints) - set(OPTION_RANGES)
    if unknown:
        raise TypeError(f"option(): unknown constraints {sorted(unknown)} (known: {', '.join(OPTION_RANGES)})")
    metadata = {"description": description, **constraints}
    if isinstance(default, (list, dict)) or (is_dataclass(default) and not isinstance(default, type)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def defaults_of(cls: type) -> dict[str, Any]:
    """The defaults of a typed option dataclass as a plain dict (nested sections included)."""
    return asdict(cls())
