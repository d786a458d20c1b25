"""Embed a dataset's entity names, relation names and questions once (resumable).

    gsr-train embed --data ../shared/data/webqsp_mini --encoder minilm --cache_dir /tmp/gsr_cache
    gsr-train embed --data rmanluo/RoG-cwq --encoder gte-large --device cuda --batch_size 128

Builds (or loads) the KG index, then every embedding table through the same cache that
training and the cosine baseline read, and prints what was done and how fast. Run it
again after a kill: it resumes from the last finished chunk. Bad rows, a model not available
here and an unwritable cache are one ``error: ...`` line and exit 2.
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import Annotated, Literal

import typer

from gsr_train.commands import SPLITS, Cache, SkipInvalid, Splits, Workers, data_source
from gsr_train.commands import run as run_verb
from gsr_train.config import default_cache_dir
from gsr_train.data.errors import report_user_errors
from gsr_train.eval.markdown import markdown_table
from gsr_train.io import write_json


def command(
    data: Annotated[
        str, typer.Option("--data", help="folder of RoG-format splits or a hub dataset name", callback=data_source)
    ],
    splits: Splits = SPLITS,
    cache: Cache = None,
    encoder: Annotated[
        str, typer.Option("--encoder", help="minilm | gte-large | hashing | hf | local folder")
    ] = "minilm",
    path: Annotated[
        str | None, typer.Option("--path", help="local model folder (encoder hf, or to override the hub)")
    ] = None,
    pooling: Annotated[Literal["mean", "cls"] | None, typer.Option("--pooling", help="default: the encoder's")] = None,
    device: Annotated[str | None, typer.Option("--device", help="cpu / cuda (default: the encoder's)")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch_size", min=1, help="texts per encoder batch")] = None,
    max_length: Annotated[int | None, typer.Option("--max_length", min=1, help="tokens per text at most")] = None,
    relation_text: Annotated[
        Literal["raw", "words"], typer.Option("--relation_text", help="relation names as written or as words")
    ] = "raw",
    skip_invalid: SkipInvalid = False,
    workers: Workers = None,
    json: Annotated[str | None, typer.Option("--json", help="also write the summary to this JSON file")] = None,
) -> dict:
    """Embed a dataset's entity names, relation names and questions once (resumable), through the
    cache that training and the cosine baseline read."""
    from gsr_train.text.encoders import EncoderUnavailable  # lazy: torch (help needs none)

    chosen = tuple(s for s in splits.split(",") if s)
    if not chosen:
        raise typer.BadParameter("no split given", param_hint="--splits")
    encoder_options = {
        "name": encoder,
        "path": path,
        "pooling": pooling,
        "device": device,
        "batch_size": batch_size,
        "max_length": max_length,
    }
    job = functools.partial(run, relation_text=relation_text, skip_invalid=skip_invalid, workers=workers, json=json)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cache_dir = cache or default_cache_dir()
    # bad rows, a model not available here, an unwritable cache: one line and exit 2, as in train.py
    return report_user_errors(
        job, data, chosen, encoder_options, cache_dir, extra=(EncoderUnavailable,), cache_dirs=[cache_dir]
    )


def main(argv: list[str] | None = None) -> dict:
    return run_verb(command, argv, "gsr-train embed")


def run(
    data: str,
    splits: tuple[str, ...],
    encoder_options: dict,
    cache_dir: str | Path,
    *,
    relation_text: str,
    skip_invalid: bool,
    workers: int | None,
    json: str | None,
) -> dict:
    """Open (or build) the index, embed what is not cached yet, print the table and the rate."""
    from gsr_train.kg.index import get_index  # lazy: torch (help needs none)
    from gsr_train.text.embeddings import get_embeddings
    from gsr_train.text.encoders import load_encoder

    t0 = time.perf_counter()
    index = get_index(data, splits=splits, cache_dir=cache_dir, skip_invalid=skip_invalid, workers=workers)
    t_index = time.perf_counter() - t0
    options = dict(encoder_options)
    encoder = load_encoder(options.pop("name"), **options)
    t0 = time.perf_counter()
    emb = get_embeddings(index, encoder, cache_dir, relation_text=relation_text, workers=workers)
    t_embed = time.perf_counter() - t0

    texts = int(emb.entity_has_text.sum()) + len(index.relations) + sum(len(index[s]) for s in index.splits)
    summary = {
        "data": str(data),
        "encoder": encoder.describe(),
        "relation_text": relation_text,
        "entities": len(index.entities),
        "entities_with_text": int(emb.entity_has_text.sum()),
        "relations": len(index.relations),
        "questions": {s: len(index[s]) for s in index.splits},
        "texts": texts,
        "index_s": round(t_index, 3),
        "embed_s": round(t_embed, 3),
        "tables": emb.meta["tables"],
    }
    rows = [(kind, f"{info['rows']:,}", info["path"]) for kind, info in emb.meta["tables"].items()]
    print(markdown_table(("table", "rows", "path"), rows, title=f"{encoder.name} embeddings of {data}") + "\n")
    print(
        f"{texts} texts ({summary['entities_with_text']} entity names with text) in {t_embed:.2f}s "
        f"(~{texts / max(t_embed, 1e-9):.0f} texts/s when nothing was cached); index {t_index:.2f}s"
    )
    if json:
        write_json(json, summary)
    return summary


if __name__ == "__main__":
    main()
