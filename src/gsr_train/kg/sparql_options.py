"""``data.sparql``: how a SPARQL endpoint given as ``data.kg`` is asked (a module of its own, so the option
checks and ``--help`` read it without the client)."""

from __future__ import annotations

from dataclasses import dataclass

from gsr_train.config import option

LABELS = (
    "http://www.w3.org/2000/01/rdf-schema#label",
    "http://www.w3.org/2004/02/skos/core#prefLabel",
    "http://rdf.freebase.com/ns/type.object.name",
)


def is_endpoint(kg: object) -> bool:
    """Whether ``data.kg`` / ``--kg`` names a SPARQL endpoint (an http(s) URL) rather than a store folder."""
    return str(kg).startswith(("http://", "https://"))


@dataclass(frozen=True)
class SparqlOptions:
    """How to ask a SPARQL endpoint (``data.sparql``)."""

    graph: str | None = option(None, "a named graph to ask (default-graph-uri); null: the endpoint's default graph")
    timeout: float = option(60.0, "seconds a query may take", gt=0)
    retries: int = option(4, "retries of a query that failed (5xx, 429, no answer), with backoff", ge=0)
    backoff_base: float = option(0.5, "seconds before the first retry (doubled per retry, jittered)", ge=0)
    backoff_max: float = option(30.0, "longest wait between retries, in seconds", ge=0)
    retry_after_max: float = option(120.0, "longest Retry-After an endpoint may ask for, in seconds", ge=0)
    concurrency: int = option(4, "queries in flight at once", ge=1)
    batch: int = option(50, "entities per query", ge=1)
    limit: int = option(
        9999,
        "edges per entity and direction; beyond it an entity is a hub, a leaf of the graph (counted); "
        "Virtuoso and DBpedia answer at most 10,000 rows",
        ge=1,
    )
    labels: list[str] = option(list(LABELS), "predicates whose literal names an entity (its label), first first")
    language: str = option("en", "the language of labels (plain literals are taken too)")
