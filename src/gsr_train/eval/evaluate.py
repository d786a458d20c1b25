"""Evaluate a retrieval-results file: ``gsr-train recall --results F --data D`` (`gsr_train.commands.recall`).

Loads (or builds) the cached KG index and shortest-path supervision of the dataset, maps
the results file onto the split's edges, computes recall at every K (overall, by hop count,
by number of topic entities), prints the tables and writes the metrics as JSON. Training and
retrieval runs score their in-memory scores with the same metrics
(`gsr_train.eval.retrieval.retrieval_metrics`); this command scores a results file that
any system wrote, in the project's results format.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from gsr_train.data.rows import find_split_file
from gsr_train.eval.labels import load_labelled_triples
from gsr_train.eval.results import MatchStats, parse_triple_file, read_results
from gsr_train.eval.retrieval import RetrievalReport, retrieval_metrics
from gsr_train.eval.schema import RECALL_KS
from gsr_train.io import file_digest
from gsr_train.kg.index import KGIndex, default_cache_dir, get_index
from gsr_train.kg.paths import get_supervision

log = logging.getLogger(__name__)

DEFAULT_SPLITS = ("train", "validation", "test")


def index_splits(data_dir: str | Path, split: str) -> tuple[str, ...]:
    """Index the same splits as training when they exist (so the cached index is shared)."""
    folder = Path(data_dir)
    if not folder.is_dir():
        return (split,)

    present = []
    for s in DEFAULT_SPLITS:
        try:
            find_split_file(folder, s)
            present.append(s)
        except FileNotFoundError:
            pass
    return tuple(present) if split in present else (*present, split)


def load_supervision(index: KGIndex, split: str, cache_dir: str | Path):
    """Shortest-path labels and hop counts (kept separate so tests can stand in for it)."""
    return get_supervision(index, split, cache_dir)


def evaluate_results(
    results_path: str | Path,
    data_dir: str | Path,
    split: str = "test",
    labels_path: str | Path | None = None,
    ks: Sequence[int] = RECALL_KS,
    cache_dir: str | Path | None = None,
    *,
    index: KGIndex | None = None,
    skip_unknown: bool = False,
    device: str | None = None,
    skip_option: str = "skip_unknown",
) -> RetrievalReport:
    """Metrics of one results file on ``split`` of ``data_dir`` (``index`` reuses a loaded one).

    ``report.meta`` records the inputs (paths, digests) and what matching found (unknown
    ids, triples not in the graph, questions missing from the file). ``skip_option``: how the
    caller spells ``skip_unknown`` (``--skip-unknown`` on the command line), named in the errors.
    """
    t0 = time.perf_counter()
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    # the files first: a malformed row is refused before the index is built or loaded
    results = parse_triple_file(results_path, check_scores=True)
    labels = parse_triple_file(labels_path) if labels_path is not None else None
    if index is None:
        index = get_index(data_dir, splits=index_splits(data_dir, split), cache_dir=cache_dir)
    graphs = index[split]
    sup = load_supervision(index, split, cache_dir)
    stats = MatchStats()
    scores, _ = read_results(results, index, split, skip_unknown, stats, skip_option)
    labelled = labelled_questions = None
    label_stats = None
    if labels is not None:
        labelled, labelled_questions, label_stats = load_labelled_triples(
            labels, index, split, skip_unknown, skip_option
        )
    report = retrieval_metrics(
        graphs,
        scores,
        ks,
        sp_label=sup.triple_label,
        labelled=labelled,
        labelled_questions=labelled_questions,
        hops=sup.hops,
        device=device,
    )
    report.meta.update(
        results=str(results_path),
        results_sha256=file_digest(results_path),
        data=str(data_dir),
        split=split,
        index_key=index.key,
        results_stats=stats.to_dict(),
        labels=str(labels_path) if labels_path is not None else None,
        labels_stats=label_stats,
        seconds=round(time.perf_counter() - t0, 3),
    )
    return report


def counts_lines(report: RetrievalReport) -> list[str]:
    """What matching the results (and labels) file skipped, dropped or missed, one line per file
    (``metrics.json`` has the same counts under ``results_stats`` / ``labels_stats``)."""
    lines = []
    for key in ("results_stats", "labels_stats"):
        counts = report.meta.get(key)
        if counts:
            known = {k: v for k, v in counts.items() if k in MatchStats.__dataclass_fields__}
            line = MatchStats(**known).counts_line()
            if line:
                lines.append(line)
    return lines
