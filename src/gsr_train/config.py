"""Hydra / OmegaConf glue: resolvers that make configs independent of the working directory."""
from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf


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


def claim_run_dir(base: str) -> str:
    """A new, empty run folder named ``base`` (or ``base_1``, ``base_2``, ... when taken).

    ``os.mkdir`` either creates the folder or fails, so two runs started in the same second
    (the folder names carry seconds) never share one. Resolved once per process (cached).
    """
    path = Path(base)
    path.parent.mkdir(parents=True, exist_ok=True)
    for n in range(10_000):
        candidate = path if n == 0 else path.with_name(f"{path.name}_{n}")
        try:
            os.mkdir(candidate)
            return str(candidate)
        except FileExistsError:
            continue
    raise RuntimeError(f"no free run folder next to {base}")


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
        OmegaConf.register_new_resolver("new_run_dir", claim_run_dir, use_cache=True)


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
