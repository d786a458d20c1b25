"""Evaluate a retrieval-results file: ``python -m gsr_train.eval.evaluate --results F --data D``.

Loads (or builds) the cached KG index and shortest-path supervision of the dataset, maps
the results file onto the split's edges, computes recall at every K (overall, by hop count,
by number of topic entities), prints the tables and writes the metrics as JSON. Training and
retrieval runs score their in-memory scores with the same metrics
(:func:`gsr_train.eval.retrieval.retrieval_metrics`); this command scores a results file that
any system wrote, in the project's results format.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from gsr_train.clikit import run
from gsr_train.data.rows import find_split_file
from gsr_train.eval.labels import load_labelled_triples
from gsr_train.eval.results import MatchStats, TripleFileError, read_results
from gsr_train.eval.retrieval import RetrievalReport, retrieval_metrics
from gsr_train.io import file_digest, write_json
from gsr_train.kg.index import KGIndex, default_cache_dir, get_index
from gsr_train.kg.paths import get_supervision

log = logging.getLogger(__name__)

DEFAULT_KS = (10, 20, 50, 100, 200)
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
    ks: Sequence[int] = DEFAULT_KS,
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
    if index is None:
        index = get_index(data_dir, splits=index_splits(data_dir, split), cache_dir=cache_dir)
    graphs = index[split]
    sup = load_supervision(index, split, cache_dir)
    stats = MatchStats()
    scores, _ = read_results(results_path, index, split, skip_unknown, stats, skip_option)
    labelled = labelled_questions = None
    label_stats = None
    if labels_path is not None:
        labelled, labelled_questions, label_stats = load_labelled_triples(
            labels_path, index, split, skip_unknown, skip_option
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


def cut_offs(text: str) -> list[int]:
    """``--ks 10,50,100`` as numbers >= 1 (anything else is the user's mistake, exit 2)."""
    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        ks = []
    if not ks or min(ks) < 1:
        raise typer.BadParameter(f"{text!r}: expected cut-offs >= 1, comma separated (10,50,100)", param_hint="--ks")
    return ks


def command(
    results: Annotated[str, typer.Option("--results", help="retrieval results JSONL(.gz), one row per question")],
    data: Annotated[str, typer.Option("--data", help="dataset folder of RoG-format splits (or a hub name)")],
    split: Annotated[str, typer.Option("--split", help="the split the results are of")] = "test",
    labels: Annotated[
        str | None, typer.Option("--labels", help="relevance labels JSONL(.gz) {id, triples} (e.g. gpt_triples_test)")
    ] = None,
    ks: Annotated[str, typer.Option("--ks", help="recall cut-offs, comma separated")] = ",".join(map(str, DEFAULT_KS)),
    out: Annotated[str | None, typer.Option("--out", help="write the metrics JSON here")] = None,
    cache: Annotated[
        str | None, typer.Option("--cache", help="cache folder (default: $GSR_TRAIN_CACHE or ~/.cache/gsr_train)")
    ] = None,
    skip_unknown: Annotated[
        bool,
        typer.Option("--skip_unknown", help="count and skip unknown ids / triples not in the graph instead of failing"),
    ] = False,
    device: Annotated[str | None, typer.Option("--device", help="torch device for the metrics (default cpu)")] = None,
) -> int:
    """Triple and answer recall@K of a retrieval results file (any retriever's, JSONL, one row per
    question) on a dataset split, with the labelled-triple recall when --labels is given."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        report = evaluate_results(
            results,
            data,
            split,
            labels,
            cut_offs(ks),
            cache,
            skip_unknown=skip_unknown,
            device=device,
            skip_option="--skip_unknown",
        )
    except (TripleFileError, FileNotFoundError, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report.table(f"{Path(results).name} on {split}", breakdowns=True))
    for line in counts_lines(report):
        print(line)
    if out:
        write_json(out, report.to_dict())
        print(f"\nmetrics written to {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(command, argv, "gsr-train recall")


if __name__ == "__main__":
    sys.exit(main())
