"""What a run reads and writes: its folders, its data (the KG index, opened one way for every
runner, and the checks that it gives the run something to do) and its ``metrics.json``. The checks of
the options before any work are `gsr_train.options.preflight`'s."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from gsr_train.arrays import segment_sum
from gsr_train.config import as_dict
from gsr_train.data.errors import PreflightError
from gsr_train.data.synthetic import ensure_synthetic
from gsr_train.eval.tail import METRICS_FILE, write_metrics
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.extracted_data import ensure_graphs
from gsr_train.kg.index import get_index
from gsr_train.kg.sparql_options import SparqlOptions
from gsr_train.parallel import WorkersError, resolve_workers, set_default_workers
from gsr_train.runtime.device import device_record, run_device
from gsr_train.runtime.training import is_rank_zero
from gsr_train.text.encoders import TextEncoder, load_encoder

log = logging.getLogger(__name__)


def cache_dir(cfg: DictConfig) -> Path:
    return Path(cfg.paths.cache_dir)


def run_top_k(cfg: DictConfig) -> int:
    """How many a run keeps per question (triples, paths, chains): every runner reads ``top_k`` here."""
    return int(cfg.top_k)


def encoder_options(cfg: DictConfig) -> dict[str, Any]:
    """The run's text encoder (``encoder:``) as plain options, for `load_encoder` and `get_embeddings`."""
    return as_dict(cfg.encoder)


def run_encoder(cfg: DictConfig) -> TextEncoder:
    """The run's text encoder, loaded."""
    return load_encoder(encoder_options(cfg))


def output_dir(cfg: DictConfig) -> Path:
    path = Path(cfg.paths.output_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class RunPlace:
    """Where a run writes, caches and computes, and with which text encoder: read from its config
    once, by the runner, for the stages below it (which take this, not the config)."""

    out: Path  # the run folder
    cache_dir: Path
    device: Any  # a torch.device: the trainer's
    encoder: dict[str, Any]  # encoder: as plain options (load_encoder, get_embeddings)

    @property
    def encoder_key(self) -> dict[str, Any]:
        """The encoder options that decide what it computes (its device does not): for cache keys."""
        return {k: v for k, v in self.encoder.items() if k != "device"}


def run_place(cfg: DictConfig) -> RunPlace:
    """The `RunPlace` of the run configured by ``cfg``."""
    encoder = encoder_options(cfg) if OmegaConf.select(cfg, "encoder", default=None) is not None else {}
    return RunPlace(output_dir(cfg), cache_dir(cfg), run_device(cfg), encoder)


def resolve_data_dir(cfg: DictConfig) -> str:
    """The folder (or hub name) of the dataset; the embedded benchmark is generated on demand, and with
    ``data.kg`` the rows without a graph get theirs cut from that KG (a cached folder of its own)."""
    return with_kg_graphs(cfg, source_dir(cfg), tuple(cfg.data.splits))


def with_kg_graphs(cfg: DictConfig, folder: str | Path, splits: Sequence[str]) -> str:
    """``folder`` itself, or with ``data.kg`` the cached copy of its ``splits`` where every row without
    a graph has the one cut from that KG (a store folder or a SPARQL endpoint, ``data.extract`` /
    ``data.sparql``); built once per process and options."""
    kg = cfg.data.get("kg")
    if not kg:
        return str(folder)
    options = ExtractOptions(**as_dict(cfg.data.get("extract") or OmegaConf.create({})))
    sparql = SparqlOptions(**as_dict(cfg.data.get("sparql") or OmegaConf.create({})))
    skip, link = bool(cfg.data.get("skip_invalid", False)), bool(cfg.data.get("link", False))
    key = (str(folder), str(kg), tuple(splits), str(cache_dir(cfg)), options, skip, link, repr(sparql))
    if key not in _EXTRACTED:
        made = ensure_graphs(str(folder), str(kg), tuple(splits), cache_dir(cfg), options, skip, link, sparql)
        _EXTRACTED[key] = str(made)
    return _EXTRACTED[key]


_EXTRACTED: dict[tuple, str] = {}


def source_dir(cfg: DictConfig) -> str:
    """``data.dir``, or the embedded benchmark's folder in the cache (generated when missing)."""
    if cfg.data.get("dir"):
        return str(cfg.data.dir)
    if cfg.data.name == "synthetic":
        options = as_dict(cfg.data.get("synthetic") or OmegaConf.create({}))  # none or empty: the defaults
        return str(ensure_synthetic(options, cache_dir(cfg)))
    raise ValueError(f"data config {cfg.data.name!r} has no `dir`; set data.dir=/path/to/rog/splits")


_LOADED_DATA: dict[str, dict] = {}


def set_run_workers(cfg: DictConfig) -> int:
    """``data.workers`` (null or absent: the cores available) as the process's worker count for
    data preparation; a value that is not an integer >= 1 is a `PreflightError` naming it."""
    try:
        set_default_workers(cfg.data.get("workers"))
    except WorkersError as e:
        raise PreflightError(str(e).replace("workers=", "data.workers=", 1)) from None
    return resolve_workers()


def load_kg_index(
    cfg: DictConfig, evaluate: Sequence[str] = (), source: Any = None, splits: Sequence[str] | None = None
):
    """The run's KG index, the one way every runner opens its data: ``data.skip_invalid`` and
    ``data.allow_overlap`` honoured, the rows each split skipped logged (and written into the
    run's metrics.json by `save_metrics`), and each ``evaluate`` split checked to give the
    run something to score (`require_split`). ``source`` / ``splits``: another folder of
    the run (GSR's graphs folder), default ``data.dir`` / ``data.splits``.

    ``data.workers`` becomes this process's worker count for preparing data
    (`gsr_train.parallel.set_default_workers`): the index build here, and the embeddings
    and supervision the run asks for later, wherever it asks."""
    set_run_workers(cfg)
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
    """What `load_kg_index` opened in this process: per folder, the index key, what was
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


def _answer_in_some_graph(graphs: Any, chunk: int = 1 << 22) -> bool:
    """Whether any answer entity is an endpoint of an edge (answers missing from a graph are
    kept as isolated nodes: they can be neither retrieved nor reached). Runs over edge chunks."""
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
    as a `PreflightError` naming the split, the data and the fix."""
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


def save_metrics(
    cfg: DictConfig,
    fingerprint: str | None,
    rows: Sequence[Mapping[str, Any]],
    details: Mapping[str, Any],
    dataset: str | None = None,
) -> Path:
    """The run's ``metrics.json`` (`gsr_train.eval.tail`: the header every method shares, then
    ``details``), atomically, rank 0 only; ``dataset``: the data's name when not ``data.name``."""
    path = output_dir(cfg) / METRICS_FILE
    if not is_rank_zero():
        return path
    try:
        experiment = cfg.get("experiment_name")
    except Exception:  # ${hydra:...} outside a Hydra run (a runner called from Python)
        experiment = details.get("experiment")
    details = {k: v for k, v in details.items() if k != "experiment"}
    details.setdefault("hardware", device_record(cfg))  # the device and matmul precision of the figures
    if loaded_data():  # the rows the data kept and skipped, however the index was made
        details.setdefault("data_rows", loaded_data())
    write_metrics(output_dir(cfg), experiment, dataset or str(cfg.data.name), fingerprint, rows, details)
    log.info("wrote %s", path)
    return path
