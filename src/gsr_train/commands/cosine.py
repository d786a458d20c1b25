"""``gsr-train cosine``: the cosine baseline on any data, outside a run folder."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import typer

from gsr_train.commands import DEFAULT_KS, Ks, cut_offs, data_source, run


def command(
    data: Annotated[
        str, typer.Option("--data", help="folder of RoG-format splits (or a hub dataset name)", callback=data_source)
    ],
    split: Annotated[str, typer.Option("--split", help="the split to retrieve for")] = "test",
    encoder: Annotated[
        str, typer.Option("--encoder", help="minilm | gte-large | hashing | local model folder")
    ] = "minilm",
    device: Annotated[str | None, typer.Option("--device", help="encoder device (cpu / cuda)")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch_size", min=1, help="encoder batch size")] = None,
    labels: Annotated[
        str | None, typer.Option("--labels", help="GPT-labelled triples JSONL for labelled-triple recall")
    ] = None,
    top_k: Annotated[int, typer.Option("--top_k", min=1, help="triples kept per question in the result file")] = 500,
    ks: Ks = DEFAULT_KS,
    mode: Annotated[
        Literal["parts", "verbalised"], typer.Option("--mode", help="how a triple is scored against the question")
    ] = "parts",
    relation_text: Annotated[
        Literal["raw", "words"], typer.Option("--relation_text", help="relation names as written or as words")
    ] = "raw",
    cache_dir: Annotated[
        str | None, typer.Option("--cache_dir", help="default: $GSR_TRAIN_CACHE or ~/.cache/gsr_train")
    ] = None,
    out: Annotated[str | None, typer.Option("--out", help="folder for results_<split>.jsonl")] = None,
) -> dict[str, Any]:
    """The cosine baseline on any data, outside a run folder: every triple scored by its cosine to
    the question (no training); results file, recall table and metrics.json."""
    from gsr_train.retrievers.cosine import run_cosine  # lazy: torch

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    encoder_options = {"name": encoder, "device": device, "batch_size": batch_size}
    return run_cosine(
        data,
        split,
        encoder_options,
        cache_dir,
        top_k,
        labels,
        out,
        mode,
        ks=cut_offs(ks),
        relation_text=relation_text,
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return run(command, argv, "gsr-train cosine")


if __name__ == "__main__":
    main()
