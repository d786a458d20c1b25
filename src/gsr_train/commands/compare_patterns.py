"""``gsr-train compare-patterns``: SimGRAG / SAFE pattern sources side by side with GSR and
SubgraphRAG (the work is `gsr_train.runs.compare_patterns`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Annotated, Literal

import typer

from gsr_train.commands import DEFAULT_KS, Ks, cut_offs, data_source, run


def _kv(items: Sequence[str]) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise SystemExit(f"expected key=value, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def command(
    data: Annotated[
        str, typer.Option("--data", help="folder of RoG-format splits, or 'synthetic'", callback=data_source)
    ],
    split: Annotated[str, typer.Option("--split", help="the split to compare on")] = "test",
    gsr_results: Annotated[
        str | None, typer.Option("--gsr_results", help="GSR results file (chains -> patterns, and the GSR row)")
    ] = None,
    gsr_metrics: Annotated[
        str | None, typer.Option("--gsr_metrics", help="GSR metrics.json (decoding time per question)")
    ] = None,
    subgraphrag_results: Annotated[
        str | None, typer.Option("--subgraphrag_results", help="SubgraphRAG results_<split>.jsonl")
    ] = None,
    subgraphrag_ckpt: Annotated[
        str | None, typer.Option("--subgraphrag_ckpt", help="SubgraphRAG checkpoint (to time its retrieval here)")
    ] = None,
    encoder: Annotated[str, typer.Option("--encoder", help="text encoder of the pattern retrievers")] = "minilm",
    cache_dir: Annotated[
        str | None, typer.Option("--cache_dir", help="default: $GSR_TRAIN_CACHE or ~/.cache/gsr_train")
    ] = None,
    out: Annotated[
        str | None,
        typer.Option("--out", help="folder for comparison.md/json and the pattern retrievers' result files"),
    ] = None,
    simgrag: Annotated[
        list[str] | None,
        typer.Option("--simgrag", metavar="KEY=VALUE", help="a SimGRAG option (repeat: k=100 k_node=16)"),
    ] = None,
    safe: Annotated[
        list[str] | None, typer.Option("--safe", metavar="KEY=VALUE", help="a SAFE option (repeat: delta=1 k_schema=3)")
    ] = None,
    gold: Annotated[Literal["filtered", "raw"], typer.Option("--gold", help="the gold chains")] = "filtered",
    max_chains: Annotated[
        int, typer.Option("--max_chains", min=1, help="patterns per question from each chain source")
    ] = 3,
    ks: Ks = DEFAULT_KS,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="first N questions only")] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="dataset name in the table title (default: the folder name)")
    ] = None,
) -> dict:
    """SimGRAG / SAFE pattern sources side by side with GSR and SubgraphRAG: answer recall@K and
    ms/question in one table (comparison.md / comparison.json)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from gsr_train.runs.compare_patterns import compare  # lazy: torch (help needs none)

    res = compare(
        data,
        split,
        gsr_results=gsr_results,
        gsr_metrics=gsr_metrics,
        subgraphrag_results=subgraphrag_results,
        subgraphrag_ckpt=subgraphrag_ckpt,
        encoder=encoder,
        cache_dir=cache_dir,
        out=out,
        simgrag=_kv(simgrag or []),
        safe=_kv(safe or []),
        gold=gold,
        max_chains=max_chains,
        ks=cut_offs(ks),
        limit=limit,
        title=f"{name} [{split}]" if name else None,
    )
    print(res["table"])
    return res


def main(argv: Sequence[str] | None = None) -> dict:
    return run(command, argv, "gsr-train compare-patterns")


if __name__ == "__main__":
    main()
