"""Embed a dataset's entity names, relation names and questions once (resumable).

    gsr-train embed --data ../shared/data/webqsp_mini --encoder minilm --cache_dir /tmp/gsr_cache
    gsr-train embed --data rmanluo/RoG-cwq --encoder gte-large --device cuda --batch_size 128

Builds (or loads) the KG index, then every embedding table through the same cache that
training and the cosine baseline read, and prints what was done and how fast. Run it
again after a kill: it resumes from the last finished chunk. Bad rows, a model not available
here and an unwritable cache are one ``error: ...`` line and exit 2.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Annotated, Literal

import typer

from gsr_train.clikit import run as run_verb
from gsr_train.commands import SPLITS, Cache, SkipInvalid, Splits, Workers
from gsr_train.data.errors import report_user_errors
from gsr_train.eval.markdown import markdown_table
from gsr_train.io import write_json
from gsr_train.kg.index import default_cache_dir, get_index
from gsr_train.text.embeddings import get_embeddings
from gsr_train.text.encoders import EncoderUnavailable, load_encoder


def command(
    data: Annotated[str, typer.Option("--data", help="folder of RoG-format splits or a hub dataset name")],
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
    args = argparse.Namespace(
        data=data,
        splits=splits,
        encoder=encoder,
        path=path,
        pooling=pooling,
        device=device,
        batch_size=batch_size,
        max_length=max_length,
        relation_text=relation_text,
        skip_invalid=skip_invalid,
        workers=workers,
        json=json,
    )
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cache_dir = cache or default_cache_dir()
    # bad rows, a model not available here, an unwritable cache: one line and exit 2, as in train.py
    return report_user_errors(run, args, cache_dir, extra=(EncoderUnavailable,), cache_dirs=[cache_dir])


def main(argv: list[str] | None = None) -> dict:
    return run_verb(command, argv, "gsr-train embed")


def run(args: argparse.Namespace, cache_dir) -> dict:
    t0 = time.perf_counter()
    index = get_index(
        args.data,
        splits=tuple(s for s in args.splits.split(",") if s),
        cache_dir=cache_dir,
        skip_invalid=args.skip_invalid,
        workers=args.workers,
    )
    t_index = time.perf_counter() - t0
    encoder = load_encoder(
        args.encoder,
        path=args.path,
        pooling=args.pooling,
        device=args.device,
        batch_size=args.batch_size,
        max_length=args.max_length,
    )
    t0 = time.perf_counter()
    emb = get_embeddings(index, encoder, cache_dir, relation_text=args.relation_text, workers=args.workers)
    t_embed = time.perf_counter() - t0

    texts = int(emb.entity_has_text.sum()) + len(index.relations) + sum(len(index[s]) for s in index.splits)
    summary = {
        "data": str(args.data),
        "encoder": encoder.describe(),
        "relation_text": args.relation_text,
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
    print(markdown_table(("table", "rows", "path"), rows, title=f"{encoder.name} embeddings of {args.data}") + "\n")
    print(
        f"{texts} texts ({summary['entities_with_text']} entity names with text) in {t_embed:.2f}s "
        f"(~{texts / max(t_embed, 1e-9):.0f} texts/s when nothing was cached); index {t_index:.2f}s"
    )
    if args.json:
        write_json(args.json, summary)
    return summary


if __name__ == "__main__":
    main()
