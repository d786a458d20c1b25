"""``python eval.py``'s config: the trained run behind ``ckpt_path`` (its folder, saved options,
experiment, method and checkpoint) and its options pointed at the data and split to score, in
evaluation-only mode; or, for an untrained retriever, the composed experiment scoring one split.
Each mistake (no run there, nothing trained in it, a trainable retriever with nothing trained) is one
line, before the run folder is written into."""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

from gsr_train.config import dataset_name, project_root
from gsr_train.data.errors import PreflightError
from gsr_train.options.gsr_retrieve import trains_first
from gsr_train.options.inputs import check_inputs
from gsr_train.options.recipes import RENAMED, runner_name

TRAINED = ("subgraphrag", "gsr", "reader")  # runners whose runs hold something trained
EVAL_KEYS = ("ckpt_path", "split")
# options of a run that name its own data; dropped when eval reads other data (unless given again)
DATA_BOUND = {"reader": ("qa.retrieval.results",), "gsr": ("gsr.llm_chains", "data.graphs")}


@dataclass
class RunSource:
    """The trained run an evaluation scores."""

    folder: Path
    config: DictConfig
    experiment: str
    method: str
    checkpoint: str


def _run_folder_of(path: Path) -> Path:
    """The run folder of a checkpoint file or a model / adapter folder inside it."""
    for candidate in (path, *path.parents):
        if (candidate / ".hydra" / "config.yaml").is_file():
            return candidate
    raise PreflightError(
        f"ckpt_path={path}: no run folder around it (a folder with .hydra/config.yaml, written by python train.py)"
    )


def _experiment_of(folder: Path, config: DictConfig) -> str:
    try:
        hydra_cfg = OmegaConf.load(folder / ".hydra" / "hydra.yaml")
        name = OmegaConf.select(hydra_cfg, "hydra.runtime.choices.experiment")
        if name:
            return str(name)
    except (OSError, ValueError):
        pass
    try:
        return str(json.loads((folder / "run.json").read_text())["experiment"])
    except (OSError, ValueError, KeyError):
        return runner_name(config.get("runner", "run"))


def _best_checkpoint(folder: Path) -> str:
    from gsr_train.eval.tail import in_run  # lazy: a refusal before it imports nothing heavy

    try:
        best = in_run(folder, json.loads((folder / "metrics.json").read_text()).get("checkpoint"))
        if best is not None and best.is_file():
            return str(best)
    except (OSError, ValueError):
        pass
    found = sorted((folder / "checkpoints").glob("best-*.ckpt"))
    if found:
        return str(found[-1])
    last = folder / "checkpoints" / "last.ckpt"
    if last.is_file():
        return str(last)
    raise PreflightError(f"ckpt_path={folder}: no checkpoint in {folder / 'checkpoints'} (did the run train?)")


def _trained_retriever(runner: str, folder: Path) -> bool:
    """A ``+experiment=retrieve`` run of a trainable retriever (it left checkpoints)."""
    return runner == "retrieve" and any((folder / "checkpoints").glob("*.ckpt"))


def find_source(ckpt_path: str | Path) -> RunSource:
    """The run behind ``ckpt_path`` (a run folder, a checkpoint, a model or adapter folder)."""
    path = Path(str(ckpt_path)).expanduser()
    if not path.exists():
        raise PreflightError(f"ckpt_path={ckpt_path} does not exist")
    folder = _run_folder_of(path.resolve())
    try:
        config = OmegaConf.load(folder / ".hydra" / "config.yaml")
    except Exception as e:  # a damaged file: yaml's or OmegaConf's error, whichever
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PreflightError(f"{folder / '.hydra' / 'config.yaml'}: not a readable run config ({first})") from None
    if not isinstance(config, DictConfig):
        raise PreflightError(f"{folder / '.hydra' / 'config.yaml'} is not a run config (a mapping)")
    runner = runner_name(config.get("runner"))
    method = runner if runner in TRAINED or _trained_retriever(runner, folder) else None
    if method is None:
        raise PreflightError(
            f"{folder}: a {runner} run has nothing trained to evaluate; score that method on "
            f"new data with python eval.py +experiment={_experiment_of(folder, config)} data.dir=..."
        )
    if path.resolve() not in (folder, folder / "checkpoints"):  # the checkpoints folder stands for its run
        checkpoint = str(path)
    elif method in ("subgraphrag", "retrieve"):
        checkpoint = _best_checkpoint(folder)
    elif method == "gsr":
        checkpoint = str(folder / "model")
    else:
        checkpoint = str(folder / "adapter")
    if not Path(checkpoint).exists():
        raise PreflightError(f"ckpt_path={ckpt_path}: {checkpoint} does not exist (did the run finish training?)")
    if method in ("subgraphrag", "retrieve"):
        _check_checkpoint_file(ckpt_path, Path(checkpoint))
    return RunSource(folder, config, _experiment_of(folder, config), method, checkpoint)


def _check_checkpoint_file(given: str | Path, path: Path) -> None:
    """A Lightning checkpoint (a complete torch zip file), or one line before anything loads it: a
    results file or a truncated copy is not handed to ``torch.load``."""
    if not path.is_file():
        return
    if path.suffix != ".ckpt":
        raise PreflightError(
            f"ckpt_path={given}: {path.name} is no checkpoint (.ckpt); give the run folder or one of its "
            "checkpoints/*.ckpt"
        )
    if not zipfile.is_zipfile(path):
        raise PreflightError(
            f"ckpt_path={given}: {path} is damaged or truncated (not a complete checkpoint); give the run "
            "folder (its best checkpoint) or another of its checkpoints"
        )


def _groups() -> set[str]:

    return {p.name for p in (project_root() / "conf").iterdir() if p.is_dir()}


def apply_overrides(cfg: DictConfig, overrides: list[str], composed: DictConfig) -> set[str]:
    """The command line's overrides on top of a run's saved config; returns the keys touched.

    A config-group choice (``encoder=gte_large``, ``trainer=gpu``) takes that section from
    ``composed`` (the eval command's own composition); values are set where they point.
    """
    groups = _groups()
    touched: set[str] = set()
    for o in OverridesParser.create().parse_overrides(overrides):
        key = o.key_or_group
        if key in EVAL_KEYS or key.startswith("hydra") or key == "experiment":
            continue
        touched.add(key)
        with open_dict(cfg):
            if key in groups and "." not in key:
                cfg[key] = composed.get(key)
            elif o.is_delete():
                parent, _, leaf = key.rpartition(".")
                node = OmegaConf.select(cfg, parent) if parent else cfg
                if node is not None and leaf in node:
                    del node[leaf]
            else:
                OmegaConf.update(cfg, key, o.value(), merge=False, force_add=True)
    return touched


def _touched(keys: set[str], prefix: str) -> bool:
    return any(k == prefix or k.startswith(prefix + ".") or prefix.startswith(k + ".") for k in keys)


def _layout(data_dir: str, split: str) -> str:
    """``rog`` when the split's rows carry graphs, ``paths`` for chain-supervision rows."""
    from gsr_train.data.rows import iter_records  # lazy: pyarrow (Hydra's option callback imports this module)

    for _, _, record in iter_records(data_dir, split):
        return "rog" if isinstance(record, dict) and "graph" in record else "paths"
    return "rog"


def migrate_renamed(cfg: DictConfig) -> None:
    """A run folder saved before an option took its one name: the value moves to the new name."""
    for old, new in RENAMED.get(runner_name(cfg.get("runner")), {}).items():
        value = OmegaConf.select(cfg, old, default=None)
        if value is None:
            continue
        parent, _, leaf = old.rpartition(".")
        with open_dict(cfg):
            del OmegaConf.select(cfg, parent)[leaf]
            if OmegaConf.select(cfg, new, default=None) is None:
                OmegaConf.update(cfg, new, value, force_add=True)


def eval_config(source: RunSource, composed: DictConfig, overrides: list[str]) -> DictConfig:
    """The run's config, pointed at the data and split to score, in evaluation-only mode."""
    cfg = source.config.copy()
    migrate_renamed(cfg)
    old_dir = OmegaConf.select(cfg, "data.dir", default=None)
    touched = apply_overrides(cfg, overrides, composed)
    split = str(composed.split)
    with open_dict(cfg):
        cfg.paths = composed.paths
        cfg.experiment_name = source.experiment
        cfg.resume = None
        cfg.data.splits = [split]
        other_data = _touched(touched, "data") and OmegaConf.select(cfg, "data.dir", default=None) != old_dir
        if other_data:
            _forget_training_data(cfg, touched, source.method)
        _evaluation_only(cfg, source, split, touched, other_data)
    return cfg


def _forget_training_data(cfg: DictConfig, touched: set[str], method: str) -> None:
    """Other data than the run trained on: its name, and no label files or results of the old data."""
    if "data" not in touched and not _touched(touched, "data.name"):
        cfg.data.name = dataset_name(str(OmegaConf.select(cfg, "data.name", default="data")), str(cfg.data.dir))
    if not _touched(touched, "data.labels") and not isinstance(cfg.data.get("labels"), str):
        cfg.data.labels = {}  # label files of the training data do not describe other data
    for key in DATA_BOUND.get(method, ()):
        if not _touched(touched, key) and OmegaConf.select(cfg, key, default=None) is not None:
            OmegaConf.update(cfg, key, None if key != "qa.retrieval.results" else {}, merge=False)


def _evaluation_only(cfg: DictConfig, source: RunSource, split: str, touched: set[str], other_data: bool) -> None:
    """The method's own options for scoring ``split`` with ``source.checkpoint``, training nothing."""
    if source.method == "subgraphrag":
        cfg.subgraphrag.eval_only = source.checkpoint
        cfg.subgraphrag.train_split = None
        cfg.subgraphrag.val_split = None
        cfg.subgraphrag.eval_split = split
    elif source.method == "retrieve":
        cfg.eval_only = source.checkpoint
        cfg.split = split
    elif source.method == "gsr":
        cfg.gsr.eval_only = source.checkpoint
        cfg.gsr.eval_split = split
        if other_data and not _touched(touched, "data.format") and _layout(str(cfg.data.dir), split) == "rog":
            cfg.data.format = "rog"
            for key in ("graphs", "graph_splits"):
                cfg.data.pop(key, None)
        if _touched(touched, "data.graphs") and not _touched(touched, "data.graph_splits"):
            cfg.data.graph_splits = None  # every split file of the graphs folder given
    else:
        cfg.qa.eval_only = source.checkpoint
        cfg.qa.train_split = None
        cfg.qa.eval_split = split


def untrained_config(composed: DictConfig) -> DictConfig:
    """``+experiment=NAME``: the composed experiment, scoring only ``split``; with neither that nor a
    ``ckpt_path`` (or a trainable retriever with nothing trained), one line saying what to give."""
    runner = OmegaConf.select(composed, "runner", default=None)
    if runner in (None, "???") or runner_name(runner) in TRAINED:
        raise PreflightError(
            "give ckpt_path=<run folder or checkpoint> (a trained run), or +experiment=NAME for an "
            "untrained retriever (cosine_baseline, classic_*, simgrag, safe)"
        )
    cfg = composed.copy()
    try:
        name = str(composed.experiment_name)
    except Exception:  # noqa: BLE001 - composed outside a Hydra run (tests, notebooks)
        name = runner_name(composed.runner)
    with open_dict(cfg):
        cfg.experiment_name = name
        cfg.data.splits = [str(composed.split)]
        if cfg.get("top_k", 0) is None:  # eval.yaml's placeholder, for a method without a top_k
            del cfg["top_k"]
    refuse_untrained_learner(cfg)
    return cfg


def refuse_untrained_learner(cfg: DictConfig) -> None:
    """``eval.py +experiment=retrieve`` with a trainable retriever and nothing trained to score."""
    spec = cfg.get("retriever")
    if runner_name(cfg.get("runner")) != "retrieve" or spec is None or cfg.get("eval_only"):
        return
    from gsr_train.retrievers.registry import trainable  # lazy: the retrievers import torch

    if trainable(spec.get("name"), spec.get("_target_")) is not None or trains_first(cfg):
        raise PreflightError(
            f"retriever {spec.get('_target_') or spec.get('name')} is trainable: eval.py scores a trained one, "
            "ckpt_path=<its run folder or checkpoint> (train it with python train.py +experiment=retrieve ...)"
        )


def check_eval_source(composed: DictConfig) -> None:
    """What ``eval.py`` is given, checked as soon as Hydra has composed it (before anything heavy is
    imported or the run folder made): the trained run behind ``ckpt_path``, or an untrained method's
    experiment and its data folder. `gsr_train.runs.evaluate_run` builds the evaluation from them."""
    if composed.get("ckpt_path"):
        find_source(composed.ckpt_path)
    else:
        check_inputs(untrained_config(composed))
