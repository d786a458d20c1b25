"""Write the embedded open-ended question set (``load_questions("embedded")``) from a RoG dataset.

    python data_prep/make_open_questions.py                  # ../shared/data/webqsp_mini, test split
    python data_prep/make_open_questions.py --data D --split test --out questions.jsonl --per-graph 2

One template question per graph with a named topic entity (``--per-graph``), OKGQA's categories
in turn across graphs (:func:`gsr_train.openended.questions.questions_from_index`). Deterministic:
the same data gives the same file. Prints the counts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gsr_train.config import shared_data_dir
from gsr_train.data.errors import report_user_errors
from gsr_train.kg.index import get_index
from gsr_train.openended.questions import EMBEDDED, QUESTION_TYPES, questions_from_index, write_questions


def build(args: argparse.Namespace) -> dict:
    index = get_index(args.data, splits=(args.split,), cache_dir=args.cache)
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    questions, counts = questions_from_index(index, args.split, per_graph=args.per_graph, types=types)
    write_questions(args.out, questions)
    table = Table(title=f"open questions: {args.out}")
    table.add_column("count")
    table.add_column("value", justify="right")
    for key, value in sorted(counts.items(), key=lambda kv: (kv[0].startswith("type_"), kv[0])):
        table.add_row(key, str(value))
    Console().print(table)
    return dict(counts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(shared_data_dir() / "webqsp_mini"), help="RoG folder / hub name")
    ap.add_argument("--split", default="test")
    ap.add_argument("--out", type=Path, default=EMBEDDED, help="question JSONL (default: the embedded set)")
    ap.add_argument("--per-graph", type=int, default=1, help="questions per graph")
    ap.add_argument("--types", default=",".join(QUESTION_TYPES), help="categories, comma separated, in turn")
    ap.add_argument("--cache", default=None, help="index cache folder (default: $GSR_TRAIN_CACHE)")
    args = ap.parse_args(argv)
    report_user_errors(build, args, extra=(ValueError, FileNotFoundError))
    return 0


if __name__ == "__main__":
    sys.exit(main())
