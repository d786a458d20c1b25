"""Pieces every runner shares: data resolution, the KG index, the Trainer, result files.

Scale-out rules every runner follows: result files and exports are written by global rank 0
only (:func:`is_rank_zero`); checkpoints are written atomically (:class:`AtomicCheckpointIO`,
a kill mid-write leaves the previous ``last.ckpt`` intact); ``resume: auto`` continues from
the run folder's ``checkpoints/last.ckpt`` (:func:`resume_path`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import hydra
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from omegaconf import DictConfig, OmegaConf, open_dict

from gsr_train.config import as_dict
from gsr_train.data.errors import UserError

log = logging.getLogger(__name__)


def run_experiment(cfg: DictConfig) -> Any:
    """Check the options, claim the run folder, seed, call the experiment's runner (``cfg.runner``,
    a name in :data:`gsr_train.runs.runners.RUNNERS`) and mark the folder with the outcome
    (:mod:`gsr_train.runs.run_folder`).

    A stop signal (:mod:`gsr_train.runs.interrupts`) marks the folder interrupted, requeues a SLURM
    job on its requeue signal and exits with ``128 + signal``; ``resume=auto`` continues the run.
    """
    import pytorch_lightning as pl

    from gsr_train.runs.interrupts import INTERRUPTS
    from gsr_train.runs.recipes import check_recipe

    check_recipe(cfg)  # unknown or misspelled options: one message before any work
    _LOADED_DATA.clear()  # one process runs every job of a basic multirun
    out = output_dir(cfg)
    experiment = cfg.get("experiment_name")
    if not _start_run(cfg, out, experiment):
        return None
    owns_signals = INTERRUPTS.install()
    try:
        pl.seed_everything(cfg.seed, workers=True)
        return _run_and_mark(cfg, out, experiment)
    finally:
        finish_trackers()
        if owns_signals:
            INTERRUPTS.uninstall()
        from gsr_train.runs.run_folder import release_folder

        release_folder(out)


def _start_run(cfg: DictConfig, out: Path, experiment: Any) -> bool:
    """Claim ``out`` (rank 0) and mark it running; False when a finished run is asked to resume."""
    from gsr_train.runs.run_folder import claim, launching_process, mark, run_state
    from gsr_train.runs.summary import run_summary

    if not launching_process():
        return True
    started = claim(out, cfg.get("resume"), "run")
    if started == "finished":
        print(f"{out} holds a finished run: nothing to resume.\n")
        print(run_summary(out, (run_state(out) or {}).get("experiment") or experiment, None))
        return False
    if started == "resume" and not cfg.get("resume"):  # a requeued SLURM job continues its own run
        log.info("requeued SLURM job: continuing the run in %s", out)
        with open_dict(cfg):
            cfg.resume = "auto"
    target = resume_path(cfg)
    if target is not None:
        check_readable_checkpoint(target)
    mark(out, "running", experiment)
    return True


def _run_and_mark(cfg: DictConfig, out: Path, experiment: Any) -> Any:
    import time

    from gsr_train.config import slurm_job_tag
    from gsr_train.runs.interrupts import RunInterrupted, requeue_slurm_job
    from gsr_train.runs.run_folder import mark
    from gsr_train.runs.summary import run_summary

    t0 = time.perf_counter()
    from gsr_train.runs.runners import runner_of

    runner = runner_of(cfg)
    try:
        result = runner(cfg)
    except RunInterrupted as stop:
        if not is_rank_zero():
            raise SystemExit(stop.exit_code) from None
        last = out / "checkpoints" / "last.ckpt"
        mark(
            out,
            "interrupted",
            experiment,
            signal=signal_name(stop.signum),
            checkpoint=str(last) if last.exists() else None,
        )
        print(
            f"\n{signal_name(stop.signum)}: {experiment} stopped"
            + (f" with {last} written" if last.exists() else "")
            + f"; continue it with: python {Path(sys.argv[0]).name} {_resume_command(cfg, out)}",
            file=sys.stderr,
        )
        requeued = requeue_slurm_job(stop.signum, slurm_job_tag())
        if requeued:
            mark(out, "interrupted", experiment, requeue=requeued)
        raise SystemExit(stop.exit_code) from None
    except BaseException as e:
        if is_rank_zero():
            mark(out, "failed", experiment, error=f"{type(e).__name__}: {e}"[:500])
        raise
    if is_rank_zero():
        mark(out, "finished", experiment)
        print("\n" + run_summary(out, experiment, time.perf_counter() - t0))
    return result


def signal_name(signum: int) -> str:
    import signal

    return signal.Signals(signum).name


def _resume_command(cfg: DictConfig, out: Path) -> str:
    """The command line that continues this run: its overrides, its folder, ``resume=auto``."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = [
            o
            for o in HydraConfig.get().overrides.task
            if not o.startswith(("resume=", "hydra.run.dir=", "hydra.sweep.dir="))
        ]
    except ValueError:  # called outside Hydra
        overrides = []
    try:
        folder = out.resolve().relative_to(Path.cwd().resolve())  # as the user would type it
    except ValueError:
        folder = out
    import shlex

    return " ".join(shlex.quote(o) for o in [*overrides, f"hydra.run.dir={folder}", "resume=auto"])


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix (a wrong option, a missing file or model, bad rows, a taken
    folder): one message, no traceback. Every such error derives from :class:`UserError`."""
    return (UserError,)


def report_user_errors(fn, *args: Any) -> Any:
    """``fn(*args)``; a user error (or a failed write into the run's cache: read-only, full) becomes
    ``error: ...`` on stderr and exit status 2 (:func:`gsr_train.data.errors.report_user_errors`)."""
    from gsr_train.data.errors import report_user_errors as report

    cfg = next((a for a in args if isinstance(a, DictConfig)), None)
    cache = OmegaConf.select(cfg, "paths.cache_dir", default=None) if cfg is not None else None
    return report(fn, *args, extra=user_errors(), cache_dirs=[cache])


def finish_trackers() -> None:
    """Close an open wandb run, so the next job of a multirun (same process) starts its own."""
    import sys

    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()


def cache_dir(cfg: DictConfig) -> Path:
    return Path(cfg.paths.cache_dir)


def output_dir(cfg: DictConfig) -> Path:
    path = Path(cfg.paths.output_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve_data_dir(cfg: DictConfig) -> str:
    """The folder (or hub name) of the dataset; the embedded benchmark is generated on demand."""
    if cfg.data.get("dir"):
        return str(cfg.data.dir)
    if cfg.data.name == "synthetic":
        from gsr_train.data.synthetic import ensure_synthetic

        options = as_dict(cfg.data.get("synthetic") or OmegaConf.create({}))  # none or empty: the defaults
        return str(ensure_synthetic(options, cache_dir(cfg)))
    raise ValueError(f"data config {cfg.data.name!r} has no `dir`; set data.dir=/path/to/rog/splits")


_LOADED_DATA: dict[str, dict] = {}


def load_kg_index(
    cfg: DictConfig, evaluate: Sequence[str] = (), source: Any = None, splits: Sequence[str] | None = None
):
    """The run's KG index, the one way every runner opens its data: ``data.skip_invalid`` and
    ``data.allow_overlap`` honoured, the rows each split skipped logged (and written into the
    run's metrics.json by :func:`save_metrics`), and each ``evaluate`` split checked to give the
    run something to score (:func:`require_split`). ``source`` / ``splits``: another folder of
    the run (GSR's graphs folder), default ``data.dir`` / ``data.splits``."""
    from gsr_train.kg.index import get_index

    folder = resolve_data_dir(cfg) if source is None else str(source)
    index = get_index(
        folder,
        splits=tuple(cfg.data.splits if splits is None else splits),
        cache_dir=cache_dir(cfg),
        skip_invalid=bool(cfg.data.get("skip_invalid", False)),
        allow_overlap=bool(cfg.data.get("allow_overlap", False)),
    )
    summary = index.skip_summary()
    _LOADED_DATA[folder] = {"index": index.key, "action": index.action, "splits": summary}
    skipped = any(
        fig.get("skipped_rows") or fig.get("rows_lost") or fig.get("truncated_files") for fig in summary.values()
    )
    (log.warning if skipped else log.info)("data %s (%s index): %s", folder, index.action, index.describe_skips())
    for split in evaluate:
        require_split(index, split, "evaluation", str(cfg.data.name))
    return index


def loaded_data() -> dict[str, dict]:
    """What :func:`load_kg_index` opened in this process: per folder, the index key, what was
    done to get it (built, opened, ...) and the rows each split loaded and skipped."""
    return dict(_LOADED_DATA)


def label_path(cfg: DictConfig, split: str) -> str | None:
    """The labelled-triples file of ``split``, or None.

    ``data.labels`` is a mapping ``{split: file}`` (each file must exist), or a file name
    pattern with ``{split}`` looked up in ``data.dir`` (labels where the folder has them: a
    preset's labels follow ``data.dir`` and vanish for a folder without them), or empty /
    null (``data.labels={}`` or ``data.labels=null``: no labels).
    """
    labels = cfg.data.get("labels")
    if not labels:
        return None
    if isinstance(labels, str):
        if "{split}" not in labels:
            raise PreflightError(f"data.labels={labels!r}: a pattern needs {{split}}, or give {{split: file}}")
        path = Path(str(cfg.data.get("dir") or "")) / labels.format(split=split)
        return str(path) if path.is_file() else None
    path = labels.get(split)
    return str(path) if path else None


class PreflightError(UserError, ValueError):
    """Inputs a run needs are missing or wrong: found before any long work starts."""


def preflight(
    cfg: DictConfig,
    splits: Sequence[str] = (),
    label_splits: Sequence[str] = (),
    checkpoints: dict[str, Any] | None = None,
    encoder: Any = None,
) -> None:
    """Check every input the run will need, before the index, embeddings or training.

    ``splits``: splits the run reads (each must be in ``data.splits`` and, for a local
    folder, have its file(s)); ``label_splits``: splits whose ``data.labels`` file must exist
    when one is configured; ``checkpoints``: ``{option name: path}`` that must be files
    (``auto`` and empty values are skipped); ``encoder``: an encoder config that must load.
    All problems are reported at once, each naming the option to fix.
    """
    from gsr_train.data.rows import split_files

    problems: list[str] = []
    configured = list(cfg.data.get("splits") or [])
    for split in dict.fromkeys(s for s in splits if s):
        if configured and split not in configured:
            problems.append(f"split {split!r} is not in data.splits {configured}")
    data_dir = cfg.data.get("dir")
    if data_dir and Path(str(data_dir)).is_dir():
        for split in dict.fromkeys(s for s in [*configured, *splits] if s):
            try:
                split_files(Path(str(data_dir)), split)
            except (FileNotFoundError, FileExistsError) as e:
                problems.append(f"data.dir: {e}")
    elif data_dir and (str(data_dir).startswith(("/", ".", "~")) or Path(str(data_dir)).suffix):
        problems.append(f"data.dir={data_dir} does not exist")
    for split in label_splits:
        path = label_path(cfg, split)
        if path and not Path(path).is_file():
            problems.append(f"data.labels.{split}={path} does not exist")
    for option, path in (checkpoints or {}).items():
        if option == "resume":
            continue
        if path and str(path) != "auto" and not Path(str(path)).exists():
            problems.append(f"{option}={path} does not exist")
    try:
        check_resume_target(cfg)
    except PreflightError as e:
        problems.append(str(e))
    if encoder is not None:
        from gsr_train.text.encoders import load_encoder

        try:
            load_encoder(as_dict(encoder) if isinstance(encoder, DictConfig) else encoder)
        except Exception as e:  # unknown name or option, model folder missing, hub offline
            problems.append(f"encoder: {e}")
    if problems:
        raise PreflightError("cannot start the run:\n  - " + "\n  - ".join(problems))


def _answer_in_some_graph(graphs: Any, chunk: int = 1 << 22) -> bool:
    """Whether any answer entity is an endpoint of an edge (answers missing from a graph are
    kept as isolated nodes: they can be neither retrieved nor reached). Runs over edge chunks."""
    import numpy as np

    answer = graphs.answer_mask.numpy()
    if not answer.any():
        return False
    edge_ptr, ent_ptr = graphs.edge_ptr.numpy(), graphs.ent_ptr.numpy()
    heads, tails = graphs.edge_index[0].numpy(), graphs.edge_index[1].numpy()
    for start in range(0, int(edge_ptr[-1]), chunk):
        idx = np.arange(start, min(start + chunk, int(edge_ptr[-1])))
        base = ent_ptr[np.searchsorted(edge_ptr, idx, side="right") - 1]
        if answer[base + heads[idx]].any() or answer[base + tails[idx]].any():
            return True
    return False


def require_split(index: Any, split: str, role: str, data: str, labels: Any = None, hint: str = "") -> None:
    """The ``role`` split (train / validation / evaluation) must give the run something to do:
    questions, answers present in their graphs, and (``labels``: per-edge positives, e.g. the
    shortest-path labels) at least one question with a positive edge. Raised before training,
    as a :class:`PreflightError` naming the split, the data and the fix."""
    from gsr_train.arrays import segment_sum

    graphs = index[split]
    where = f"the {role} split {split!r} of {data}"
    if len(graphs) == 0:
        raise PreflightError(f"{where} is empty" + (f"; {hint}" if hint else ""))
    if not _answer_in_some_graph(graphs):
        raise PreflightError(
            f"{where}: none of its {len(graphs)} questions has an answer entity in its graph, "
            "so nothing can be found or scored" + (f"; {hint}" if hint else "")
        )
    if labels is not None:
        positives = segment_sum(labels.numpy().astype("int64"), graphs.edge_ptr.numpy())
        if not (positives > 0).any():
            raise PreflightError(
                f"{where}: none of its {len(graphs)} questions has a path from a topic to an "
                "answer entity (no positive triple)" + (f"; {hint}" if hint else "")
            )


def planned_world_size(cfg: DictConfig) -> int:
    """The number of training processes the trainer options ask for (devices x nodes), before any
    Trainer exists: ``devices`` an int, a list of ids, or auto / -1 (every GPU; 1 on the CPU)."""
    trainer = cfg.get("trainer") or {}
    devices, nodes = trainer.get("devices", "auto"), int(trainer.get("num_nodes", 1) or 1)
    if OmegaConf.is_list(devices) or isinstance(devices, (list, tuple)):
        count = len(devices)
    elif str(devices).strip().lstrip("-").isdigit() and int(devices) != -1:
        count = int(devices)
    else:  # auto / -1: every accelerator Lightning would take
        import torch

        gpu = str(trainer.get("accelerator", "auto")) in ("auto", "gpu", "cuda") and torch.cuda.is_available()
        count = torch.cuda.device_count() if gpu else 1
    return max(count, 1) * nodes


def rank_batch(cfg: DictConfig, batch: int, key: str) -> int:
    """Each training process's batch for the recipe's ``key`` = ``batch``: the global batch split
    over the processes (``batch_scope=global``, the default, so DDP trains the recipe that one
    process trains), or all of it (``batch_scope=per_device``)."""
    scope = str(cfg.get("batch_scope", "global"))
    if scope not in ("global", "per_device"):
        raise PreflightError(f"batch_scope={scope}: use global or per_device")
    world = planned_world_size(cfg)
    if scope == "per_device" or world == 1:
        return int(batch)
    if batch % world:
        raise PreflightError(
            f"{key}={batch} is the global batch (batch_scope=global) and does not split over "
            f"{world} processes: use a multiple of {world}, or batch_scope=per_device (each "
            f"process takes {batch}, a global batch of {batch * world})"
        )
    log.info("%s=%d over %d processes: %d each (batch_scope=global)", key, batch, world, batch // world)
    return int(batch) // world


def one_setting(cfg: DictConfig, used: str, other: str = "trainer.max_epochs") -> None:
    """``other`` must equal ``used`` (the runner reads ``used``): two different values for one
    thing (epochs) are the user's mistake, reported instead of one silently winning."""
    a, b = OmegaConf.select(cfg, used, default=None), OmegaConf.select(cfg, other, default=None)
    if a is not None and b is not None and a != b:
        raise PreflightError(
            f"two settings for one thing: {other}={b} and {used}={a}; this experiment reads {used}, set that one"
        )


def require_family(cfg: DictConfig, families: Sequence[str], runner: str) -> None:
    """``cfg.model`` must be a model of one of ``families`` (``model=gsr_tiny`` on SubgraphRAG is an error)."""
    family = OmegaConf.select(cfg, "model.family", default=None)
    if family not in families:
        name = OmegaConf.select(cfg, "model.name", default="?")
        raise PreflightError(
            f"model={name} is a {family or 'unknown'} model; the {runner} runner needs a "
            f"{' / '.join(families)} model (model=...)"
        )


def is_rank_zero() -> bool:
    """True in the process that writes results (global rank 0; always true without DDP)."""
    from lightning_fabric.utilities.rank_zero import rank_zero_only

    rank = getattr(rank_zero_only, "rank", None)
    if rank is None:
        rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)) or 0)
    return int(rank) == 0


def resume_path(cfg: DictConfig) -> str | None:
    """The checkpoint ``fit`` resumes from (``cfg.resume``); one way to resume: in the run's own folder.

    ``resume: auto`` -> ``<run folder>/checkpoints/last.ckpt`` when it exists (a fresh run
    otherwise); ``resume: <run folder>/checkpoints/x.ckpt`` -> that file, which must lie in this
    run's folder (``hydra.run.dir``): the run goes on where its checkpoints, logs and best
    score are, so the evaluated checkpoint is the best of the whole run; null -> none.
    """
    want = cfg.get("resume")
    if not want:
        return None
    out = Path(cfg.paths.output_dir)
    if str(want) == "auto":
        last = out / "checkpoints" / "last.ckpt"
        if last.exists():
            log.info("resuming from %s", last)
            return str(last)
        log.info("resume=auto: no %s yet, starting fresh", last)
        return None
    check_resume_target(cfg)
    return str(want)


def check_readable_checkpoint(path: str | Path) -> None:
    """A checkpoint must be whole before a run spends time on its data: torch writes a zip archive,
    whose directory (at its end) is gone when the file was cut short or overwritten."""
    import zipfile

    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            archive.namelist()
    except (OSError, zipfile.BadZipFile) as e:
        others = sorted(p.name for p in path.parent.glob("*.ckpt") if p != path)
        hint = f"resume={path.parent / others[-1]} continues from another of its checkpoints; " if others else ""
        raise PreflightError(
            f"{path} cannot be read ({e}): it is damaged or cut short. {hint}move it away to "
            "start the run over in its folder"
        ) from None


def check_resume_target(cfg: DictConfig) -> None:
    """``resume=<file>`` must be an existing checkpoint of this run's folder (see :func:`resume_path`)."""
    want = cfg.get("resume")
    if not want or str(want) == "auto":
        return
    path = Path(str(want))
    if not path.is_file():
        raise PreflightError(f"resume={want} does not exist")
    run = path.resolve().parent.parent if path.parent.name == "checkpoints" else path.resolve().parent
    out = Path(cfg.paths.output_dir).resolve()
    if run != out:
        raise PreflightError(
            f"resume={want} belongs to the run folder {run}, but this run writes to {out}: "
            f"continue that run in its own folder with hydra.run.dir={run} resume=auto"
        )


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning CheckpointIO that writes to a temporary name and renames: no half-written ckpt."""

    def save_checkpoint(self, checkpoint: dict, path: Any, storage_options: Any = None) -> None:
        import torch

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        try:
            torch.save(checkpoint, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()


def make_trainer(cfg: DictConfig, callbacks: Sequence[Any] = (), **overrides):
    """The Lightning Trainer of ``cfg.trainer`` with the configured loggers and callbacks.

    Loggers get the resolved config as hyperparameters; checkpoints are written atomically.
    """
    loggers = [hydra.utils.instantiate(c) for c in (cfg.get("logger") or {}).values() if c]
    extra = [hydra.utils.instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c]
    from gsr_train.runs.checkpoints import LastCheckpoint

    if not any(isinstance(c, LastCheckpoint) for c in [*callbacks, *extra]):  # last.ckpt = newest state, always
        extra.append(
            LastCheckpoint(str(Path(cfg.paths.output_dir) / "checkpoints"), cfg.get("checkpoint_every_n_steps"))
        )
    if not sys.stderr.isatty():  # a log file: progress and ETA lines instead of a live bar
        from gsr_train.runs.log_progress import TrainingLogProgress

        if not any(isinstance(c, TrainingLogProgress) for c in [*callbacks, *extra]):
            extra.append(TrainingLogProgress())
    if not overrides.get("enable_progress_bar", cfg.trainer.get("enable_progress_bar", True)):
        from pytorch_lightning.callbacks import ProgressBar

        extra = [c for c in extra if not isinstance(c, ProgressBar)]  # trainer.enable_progress_bar=false wins
    plugins = list(overrides.pop("plugins", None) or [])
    if not any(isinstance(p, TorchCheckpointIO) for p in plugins):
        plugins.append(AtomicCheckpointIO())
    from lightning_fabric.plugins.environments import SLURMEnvironment

    if SLURMEnvironment.detect() and not any(isinstance(p, SLURMEnvironment) for p in plugins):
        # Lightning's SLURM environment (ranks, nodes), without its requeue handler: LastCheckpoint
        # stops at a resumable step and run_experiment requeues (gsr_train.runs.interrupts)
        plugins.append(SLURMEnvironment(auto_requeue=False))
    trainer = hydra.utils.instantiate(
        # the runner's callbacks first: trainer.checkpoint_callback (whose best path DDP spawn
        # sends back to the main process) is then the runner's monitored checkpoint
        cfg.trainer,
        logger=loggers or False,
        callbacks=[*callbacks, *extra],
        plugins=plugins,
        **overrides,
    )
    for lg in loggers:
        log_hyperparams(lg, cfg)
    return trainer


def fit_state(trainer: Any, checkpoint_cb: Any = None) -> dict:
    """``global_step``, ``epochs_run``, ``best_path``, ``best_score`` of a finished ``fit``.

    After ``ddp_spawn`` the main process's trainer only gets the weights and the best path
    back (its step counters stay 0): the figures are then read from the checkpoints.
    """
    import torch

    state: dict[str, Any] = {
        "global_step": int(trainer.global_step),
        "epochs_run": int(trainer.current_epoch),
        "best_path": getattr(checkpoint_cb, "best_model_path", "") or None,
        "best_score": None,
    }
    score = getattr(checkpoint_cb, "best_model_score", None)
    if score is not None:
        state["best_score"] = float(score)
    last = Path(getattr(checkpoint_cb, "dirpath", "") or ".") / "last.ckpt"
    if state["global_step"] == 0 and last.exists():
        ckpt = torch.load(last, map_location="cpu", weights_only=False)
        state["global_step"] = int(ckpt.get("global_step", 0))
        state["epochs_run"] = int(ckpt.get("epoch", 0))
    if state["best_score"] is None and state["best_path"] and Path(state["best_path"]).exists():
        ckpt = torch.load(state["best_path"], map_location="cpu", weights_only=False)
        for key, cb in (ckpt.get("callbacks") or {}).items():
            if key.startswith("ModelCheckpoint") and cb.get("best_model_path") == state["best_path"]:
                value = cb.get("best_model_score")
                state["best_score"] = None if value is None else float(value)
    return state


def flat_config(cfg: DictConfig) -> dict:
    """The resolved config as a flat ``{"a/b/c": value}`` dict (what loggers show as hparams)."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}/{k}" if prefix else str(k))
        elif isinstance(node, list) and not all(isinstance(x, (int, float, str, bool)) or x is None for x in node):
            out[prefix] = str(node)
        else:
            out[prefix] = node

    try:
        data = as_dict(cfg)
    except Exception:  # e.g. ${hydra:...} outside a Hydra run
        data = as_dict(cfg, resolve=False)
    data.pop("hydra", None)
    walk(data, "")
    return out


def log_hyperparams(logger: Any, cfg: DictConfig) -> None:
    """Hyperparameters of the run (the composed config) to one Lightning logger."""
    try:
        logger.log_hyperparams(flat_config(cfg))
    except Exception as e:  # a logger that cannot take some value must not stop training
        log.warning("could not log hyperparameters to %s: %s", type(logger).__name__, e)


def _adopt_csv_header(logger: Any) -> None:
    """A CSVLogger that did not write the file itself (main process after ddp_spawn) learns its columns."""
    import csv

    writer = getattr(logger, "experiment", None) if type(logger).__name__ == "CSVLogger" else None
    path = getattr(writer, "metrics_file_path", None)
    if writer is None or writer.metrics_keys or not path or not Path(path).is_file():
        return
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    writer.metrics_keys.extend(k for k in header if k not in writer.metrics_keys)


def log_final_metrics(trainer: Any, metrics: dict[str, Any], prefix: str = "final") -> None:
    """Flat numeric ``metrics`` to every logger of ``trainer`` (rank 0), then flush them."""
    if trainer is None or not is_rank_zero():
        return
    flat = {
        f"{prefix}/{k}": float(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
    }
    for lg in trainer.loggers:
        try:
            _adopt_csv_header(lg)
            lg.log_metrics(flat, step=int(trainer.global_step))
            if hasattr(lg, "experiment") and type(lg).__name__ == "WandbLogger":
                lg.experiment.summary.update(flat)
            lg.save()
        except Exception as e:
            log.warning("could not log final metrics to %s: %s", type(lg).__name__, e)


def save_metrics(
    cfg: DictConfig, fingerprint: str | None, rows: Sequence[Mapping[str, Any]], details: Mapping[str, Any]
) -> Path:
    """The run's ``metrics.json`` (:mod:`gsr_train.eval.tail`: the header every method shares, then
    ``details``), atomically, rank 0 only."""
    from gsr_train.eval.tail import METRICS_FILE, write_metrics

    path = output_dir(cfg) / METRICS_FILE
    if not is_rank_zero():
        return path
    try:
        experiment = cfg.get("experiment_name")
    except Exception:  # ${hydra:...} outside a Hydra run (a runner called from Python)
        experiment = details.get("experiment")
    details = {k: v for k, v in details.items() if k != "experiment"}
    if loaded_data():  # the rows the data kept and skipped, however the index was made
        details.setdefault("data_rows", loaded_data())
    write_metrics(output_dir(cfg), experiment, str(cfg.data.name), fingerprint, rows, details)
    log.info("wrote %s", path)
    return path
