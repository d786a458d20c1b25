"""Link questions to the entities of a KG store, and measure it where the rows have their topic entities.

    gsr-train link --data ../shared/data/webqsp_mini --kg my_kg_store --splits test

For every question of the splits: the entities it names, best first (`gsr_train.kg.linking`).
Where a row has ``q_entity``, its topic-entity recall@1 and @5 (a linked entity among the row's), a
measure of the data before ``data.link=true`` fills the rows that have none. ``--out FILE``: every
question's linked entities and scores as JSONL.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from gsr_train.commands import SPLITS, Splits, data_source, existing_paths
from gsr_train.commands import run as run_verb
from gsr_train.data.errors import report_user_errors


def command(
    data: Annotated[
        str, typer.Option("--data", help="folder of RoG-format splits (graphs not needed)", callback=data_source)
    ],
    kg: Annotated[str, typer.Option("--kg", help="a KG store (gsr-train import-kg)", callback=existing_paths)],
    splits: Splits = SPLITS,
    top: Annotated[int, typer.Option("--top", min=1, help="entities kept per question")] = 5,
    out: Annotated[str | None, typer.Option("--out", help="every question's linked entities as JSONL")] = None,
) -> dict:
    """Link questions to the entities of a KG store; topic-entity recall@1 / @5 where rows have q_entity."""
    return report_user_errors(run, data, kg, [s.strip() for s in splits.split(",") if s.strip()], top, out)


def run(data: str, kg: str, splits: list[str], top: int, out: str | None) -> dict:
    from gsr_train.data.rows import iter_records
    from gsr_train.eval.markdown import markdown_table
    from gsr_train.io import atomic_write
    from gsr_train.kg.linking import EntityLinker
    from gsr_train.kg.store import open_store

    store = open_store(kg)
    t0 = time.perf_counter()
    linker = EntityLinker(store)
    figures: dict = {"index_s": round(time.perf_counter() - t0, 2), "splits": {}}
    lines = []
    for split in splits:
        seen = gold = at1 = at5 = 0
        t0 = time.perf_counter()
        for _, _, record in iter_records(data, split):
            if not isinstance(record, dict):
                continue
            linked = linker.link(str(record.get("question", "")), top)
            names = [store.entities[e] for e, _ in linked]
            lines.append(
                {
                    "split": split,
                    "id": record.get("id"),
                    "linked": [[n, round(s, 3)] for n, (_, s) in zip(names, linked)],
                }
            )
            seen += 1
            topics = set(record.get("q_entity") or [])
            if topics:
                gold += 1
                at1 += bool(topics & set(names[:1]))
                at5 += bool(topics & set(names[:5]))
        figures["splits"][split] = {
            "questions": seen,
            "with_q_entity": gold,
            "recall@1": round(at1 / gold, 4) if gold else None,
            "recall@5": round(at5 / gold, 4) if gold else None,
            "ms_per_question": round(1000 * (time.perf_counter() - t0) / max(seen, 1), 3),
        }
    header = ["split", "questions", "with q_entity", "recall@1", "recall@5", "ms / question"]
    print(markdown_table(header, [[s, *f.values()] for s, f in figures["splits"].items()]))
    if out:
        with atomic_write(out, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(line) + "\n" for line in lines)
    return figures


def main(argv: list[str] | None = None) -> dict:
    return run_verb(command, argv, "gsr-train link")
