"""``python eval.py``: score a trained run, or an untrained retriever, on any data.

``python eval.py ckpt_path=RUN_FOLDER_OR_CHECKPOINT data.dir=FOLDER [split=test] [top_k=K]``
reads the experiment, model and data options from the run folder's saved config
(``.hydra/config.yaml``), swaps in the data given on the command line, needs only the split
it scores (on the run's own data, its cached index: `open_the_runs_own_index`), and calls the
experiment's own runner in evaluation-only mode, so the new run folder gets the same results and
metrics files a training run writes, plus ``eval.json`` (what was scored, from which run).
``python eval.py +experiment=NAME data.dir=...`` scores an untrained retriever (cosine, classic, SimGRAG,
SAFE) the same way.

Which checkpoint of a run: SubgraphRAG and a trained retriever (``+experiment=retrieve`` with a
trainable scorer, a plugin's included, or GSR), the best one (``metrics.json``, else the
``best-*.ckpt``); GSR, the saved ``model/`` folder; readers, the ``adapter/`` folder. A
``.ckpt`` or folder given directly is used as it is.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from gsr_train.io import write_json
from gsr_train.kg.index import index_key
from gsr_train.options.check import check_recipe
from gsr_train.options.eval_config import RunSource, eval_config, find_source, untrained_config
from gsr_train.options.recipes import runner_name
from gsr_train.runs.experiment import run_experiment
from gsr_train.runtime.run_data import cache_dir, output_dir, source_dir
from gsr_train.runtime.run_folder import run_status
from gsr_train.runtime.training import is_rank_zero

log = logging.getLogger(__name__)


def _say_what_is_scored(source: RunSource) -> str | None:
    """Print which checkpoint is scored, and that its run did not finish when it did not: a
    killed or interrupted run's best checkpoint is the best of the epochs it completed."""
    status = run_status(source.folder)
    print(f"evaluating {source.checkpoint} ({source.experiment} run in {source.folder})", file=sys.stderr)
    if status not in (None, "finished"):
        print(
            f"warning: that run did not finish (status: {status}); its checkpoints hold only what it trained "
            f"before it stopped. Continue it first with: python train.py hydra.run.dir={source.folder} "
            "resume=auto (plus its own overrides)",
            file=sys.stderr,
        )
    return status


def _task_overrides() -> list[str]:
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:  # outside a Hydra run
        return []


# the runners whose training opened ``data.splits`` as one KG index and score a split of it
OWN_INDEX_METHODS = ("subgraphrag", "retrieve")


def open_the_runs_own_index(cfg: DictConfig, source: RunSource) -> None:
    """On the data the run trained on, score the split in the run's own KG index (all its splits) when that
    index is still in the cache: the split's graphs, embeddings and supervision are then the run's, opened,
    not rebuilt and re-embedded (at real size, hours of MiniLM), and the figures are the run's own test
    figures. Without it (another cache, a moved folder) only the scored split is read, as on other data."""
    ran = OmegaConf.to_container(source.config.data, resolve=False)
    now = OmegaConf.to_container(cfg.data, resolve=False)
    assert isinstance(ran, dict) and isinstance(now, dict)
    splits = [str(s) for s in ran.pop("splits", None) or ()]
    now.pop("splits", None)
    if source.method not in OWN_INDEX_METHODS or ran != now or list(cfg.data.splits)[0] not in splits:
        return
    try:
        key = index_key(source_dir(cfg), splits, bool(cfg.data.get("skip_invalid", False)))
    except (OSError, ValueError):  # a split's file gone: the scored split alone
        return
    if (cache_dir(cfg) / "kg_index" / key).is_dir():
        log.info("scoring %s in the run's own KG index (splits %s, cached)", cfg.data.splits[0], ", ".join(splits))
        with open_dict(cfg):
            cfg.data.splits = splits


def run(composed: DictConfig, overrides: list[str] | None = None) -> Any:
    """Entry of ``eval.py``: build the evaluation config and check it, note the source in the run
    folder, run the method's runner. ``overrides``: the command line's overrides to put on the run's
    config (default: Hydra's)."""
    if composed.get("ckpt_path"):
        source = find_source(composed.ckpt_path)
        cfg = eval_config(source, composed, _task_overrides() if overrides is None else overrides)
        note: dict[str, Any] = {"source_run": str(source.folder), "checkpoint": source.checkpoint}
        note["method"] = source.method
        note.update(experiment=source.experiment, source_status=_say_what_is_scored(source))
    else:
        cfg = untrained_config(composed)
        note = {
            "source_run": None,
            "checkpoint": None,
            "method": runner_name(cfg.runner),
            "experiment": cfg.experiment_name,
        }
    note.update(
        data=OmegaConf.select(cfg, "data.name"), data_dir=OmegaConf.select(cfg, "data.dir"), split=str(composed.split)
    )
    log.info("evaluating %s", note)
    check_recipe(cfg)  # the options, and an unknown runner, before anything is written into the run folder
    if composed.get("ckpt_path"):
        open_the_runs_own_index(cfg, source)
    if is_rank_zero():  # first, so the run's closing summary lists it (run.json marks success)
        write_json(output_dir(cfg) / "eval.json", note)
    return run_experiment(cfg)
