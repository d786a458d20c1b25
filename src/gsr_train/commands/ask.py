"""Ask one question of a trained SubgraphRAG run over a KG store or a SPARQL endpoint: the linked entities,
the best triples.

    gsr-train ask outputs/subgraphrag_quickstart/<time> "where was justin bieber born" --kg my_kg_store
    gsr-train ask RUN "who directed it" --kg my_kg_store --entity "Titanic" --top_k 20
    gsr-train ask RUN "where was justin bieber born" --kg my_kg_store --reader outputs/reader_quickstart/<time>
    gsr-train ask RUN "where was justin bieber born" --kg http://localhost:8890/sparql

The topic entity comes from the linker unless ``--entity`` names it (an endpoint's: label lookups); the
question's graph is cut from the KG as ``data.kg`` cuts it and every triple scored by the run;
``--reader`` gives the best triples (as many as that run's ``top_k``) to a trained reader run's reader,
which answers. The first call embeds a store's names through the cache; from Python,
``Pipeline.from_run(RUN, kg=DIR).ask(question)`` (`gsr_train.runs.pipeline`) keeps everything
loaded between questions.
"""

from __future__ import annotations

from typing import Annotated

import typer

from gsr_train.commands import Cache, existing_paths
from gsr_train.commands import run as run_verb
from gsr_train.data.errors import report_user_errors


def command(
    run: Annotated[
        str, typer.Argument(help="a trained SubgraphRAG run folder (or a checkpoint in one)", callback=existing_paths)
    ],
    question: Annotated[str, typer.Argument(help="the question, in quotes")],
    kg: Annotated[str, typer.Option("--kg", help="a KG store (gsr-train import-kg) or a SPARQL endpoint's URL")],
    entity: Annotated[
        list[str] | None, typer.Option("--entity", help="a topic entity by name (repeatable; default: linked)")
    ] = None,
    top_k: Annotated[int, typer.Option("--top_k", min=1, help="triples shown")] = 10,
    reader: Annotated[
        str | None, typer.Option("--reader", help="a trained reader run (reader_*) that answers from the triples")
    ] = None,
    graph: Annotated[
        str | None,
        typer.Option("--graph", help="with --kg URL: the named graph to ask (default: the run's data.sparql.graph)"),
    ] = None,
    cache: Cache = None,
) -> dict:
    """Ask one question of a trained SubgraphRAG run over a KG store or SPARQL endpoint: linked entities,
    best triples, and a trained reader's answer with --reader."""
    return report_user_errors(_ask, run, question, kg, entity, top_k, reader, cache, graph)


def _ask(
    run: str,
    question: str,
    kg: str,
    entity: list[str] | None,
    top_k: int,
    reader: str | None,
    cache: str | None,
    graph: str | None = None,
) -> dict:
    from dataclasses import asdict

    from gsr_train.eval.markdown import markdown_table
    from gsr_train.runs.pipeline import Pipeline

    answer = Pipeline.from_run(run, kg, cache, top_k, reader, graph).ask(question, entity)
    linked = ", ".join(f"{name} ({score:.2f})" for name, score in answer.entities)
    print(f"question: {answer.question}\ntopic entities: {linked}\ngraph cut: {answer.triples:,} triples")
    rows = [[i + 1, e.head, e.relation, e.tail, f"{e.score:.3f}"] for i, e in enumerate(answer.evidence)]
    print(markdown_table(["rank", "head", "relation", "tail", "score"], rows, left=4))
    if reader:
        print(f"answer: {'; '.join(answer.answers) or '(none read)'}\nreader said: {answer.reading!r}")
    return asdict(answer)


def main(argv: list[str] | None = None) -> dict:
    return run_verb(command, argv, "gsr-train ask")
