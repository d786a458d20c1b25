"""A SPARQL endpoint as a KG source: a polite, cached client (Virtuoso, DBpedia, Wikidata, ...).

What extraction needs from a database that serves the KG, and what this client does:

* never ask twice: every answered query goes to a persistent `gsr_train.response_cache.ResponseCache`
  (SQLite, committed per answer) keyed by the endpoint, the named graph and the query,
  so a rerun or a run resumed after kill -9 asks only what was not answered yet;
* be polite: queries of many entities at once (``batch`` per query), ``concurrency`` queries in flight
  at most, a ``timeout`` per query, retries with exponential backoff on 5xx / 429 / connection errors,
  honouring ``Retry-After`` (`gsr_train.http_retry`);
* say what went wrong: a query that fails for good, or an answer that is no SPARQL JSON result, is one
  line naming the endpoint and the last error (`SparqlError`);
* keep hubs small: a ``limit`` of edges per entity and direction, counted where it cuts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from tenacity import Retrying

from gsr_train.data.errors import UserError
from gsr_train.http_retry import Retryable, retry_policy, retryable
from gsr_train.kg.sparql_options import SparqlOptions, is_endpoint
from gsr_train.response_cache import ResponseCache

log = logging.getLogger(__name__)
RESULTS_JSON = "application/sparql-results+json"
QUERY_FORMAT = 2  # part of every cache key: a change of the queries' wording is a new key


class SparqlError(UserError, RuntimeError):
    """A query that failed for good, or an answer that is no SPARQL result: one line."""


def check_endpoint(endpoint: str) -> str:
    """The endpoint's URL, or one line: what ``data.kg`` takes."""
    if not is_endpoint(endpoint):
        raise SparqlError(f"data.kg={endpoint!r}: a SPARQL endpoint is an http(s) URL")
    return endpoint.rstrip("/")


@dataclass
class SparqlStats:
    queries: int = 0  # sent to the endpoint (answered)
    cached: int = 0  # answered from the cache
    retries: int = 0
    seconds: float = 0.0  # spent waiting for the endpoint
    extra: dict[str, int] = field(default_factory=dict)

    def count(self, what: str, n: int = 1) -> None:
        self.extra[what] = self.extra.get(what, 0) + n


def _value(term: Any, where: str) -> str:
    if not isinstance(term, dict) or not isinstance(term.get("value"), str):
        raise SparqlError(f"{where}: a result binding without a value: {str(term)[:200]!r}")
    return term["value"]


Columns = dict[str, list[Any]]


def rows_of(columns: Columns) -> list[dict[str, str]]:
    """Columns back as rows ``{variable: value}``, unbound variables left out."""
    names = list(columns)
    n = len(columns[names[0]]) if names else 0
    return [{v: columns[v][i] for v in names if columns[v][i] is not None} for i in range(n)]


class SparqlClient:
    """SELECT queries against one endpoint, cached and retried (see the module docstring)."""

    def __init__(self, endpoint: str, options: SparqlOptions | None = None, cache_dir: str | Path | None = None):
        self.endpoint = check_endpoint(endpoint)
        self.options = options = options or SparqlOptions()
        self.stats = SparqlStats()
        self.cache = ResponseCache(Path(cache_dir) / "sparql" / "responses.sqlite") if cache_dir else None
        self._http = httpx.Client(timeout=options.timeout, headers={"Accept": RESULTS_JSON})
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        self._http.close()
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> SparqlClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def key(self, query: str) -> str:
        o = self.options
        blob = json.dumps([QUERY_FORMAT, self.endpoint, o.graph, query], ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def columns(self, query: str, keep: bool = True) -> Columns:
        """The answer of a SELECT query as columns: ``{variable: [value or None per row]}``. An answer is
        cached in this compact form (checked once, when it arrives), which reads back fast; ``keep``
        false: not cached (a caller that caches the answer in pieces of its own)."""
        key = self.key(query)
        body = self.cache.get(key) if self.cache is not None and keep else None
        if body is not None:
            self.stats.cached += 1
            return body["columns"]
        columns = self._columns(self._post(query))
        if self.cache is not None and keep:
            self.cache.put(key, {"endpoint": self.endpoint, "graph": self.options.graph}, {"columns": columns})
        return columns

    def select(self, query: str) -> list[dict[str, str]]:
        """The rows of a SELECT query, each ``{variable: value}`` (unbound variables left out)."""
        return rows_of(self.columns(query))

    def columns_many(self, queries: Sequence[str], keep: bool = True) -> list[Columns]:
        """`columns` of each query, ``concurrency`` at a time, in order; a query given twice is
        asked once, and what the cache answers is read here, without a thread."""
        found = dict(self.columns_iter(queries, keep))
        return [found[q] for q in queries]

    def columns_iter(self, queries: Sequence[str], keep: bool = True) -> Iterator[tuple[str, Columns]]:
        """``(query, columns)`` of each distinct query as its answer arrives (cached ones first), so a
        caller can keep each before the next: a kill loses at most the queries in flight."""
        missing = []
        for q in dict.fromkeys(queries):
            body = self.cache.get(self.key(q)) if self.cache is not None and keep else None
            if body is None:
                missing.append(q)
            else:
                self.stats.cached += 1
                yield q, body["columns"]
        ask = functools.partial(self.columns, keep=keep)
        if len(missing) <= 1 or self.options.concurrency == 1:
            yield from ((q, ask(q)) for q in missing)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.options.concurrency, thread_name_prefix="sparql")
        yield from zip(missing, self._pool.map(ask, missing))

    def select_many(self, queries: Sequence[str]) -> list[list[dict[str, str]]]:
        """`select` of each query (as `columns_many` asks them)."""
        return [rows_of(c) for c in self.columns_many(queries)]

    def _columns(self, body: Any) -> Columns:
        """The answer's bindings as columns, every value checked: one line naming the endpoint otherwise."""
        where = f"SPARQL endpoint {self.endpoint}"
        try:
            bindings = body["results"]["bindings"]
            names = list(body.get("head", {}).get("vars") or [])
        except (TypeError, KeyError, AttributeError):
            raise SparqlError(
                f"{where}: answered something that is no SPARQL JSON result: {str(body)[:200]!r}"
            ) from None
        if not isinstance(bindings, list):
            raise SparqlError(f"{where}: its result's bindings are no list")
        for row in bindings:
            if not isinstance(row, dict):
                raise SparqlError(f"{where}: a result row that is no object: {str(row)[:200]!r}")
            names += [k for k in row if k not in names]
        return {v: [_value(row[v], where) if v in row else None for row in bindings] for v in names}

    def _post(self, query: str) -> Any:
        """POST the query with retries (the shared policy of `gsr_train.http_retry`); the parsed JSON
        body, or `SparqlError`."""
        o = self.options
        data = {"query": query, **({"default-graph-uri": o.graph} if o.graph else {})}

        def on_retry(last: str, retry: int, delay: float) -> None:
            self.stats.retries += 1
            log.info("SPARQL %s: %s; retry %d/%d in %.2fs", self.endpoint, last[:200], retry, o.retries, delay)

        def give_up(last: str) -> SparqlError:
            return SparqlError(
                f"SPARQL endpoint {self.endpoint}: failed after {o.retries + 1} tries; last error: {last}"
            )

        policy = retry_policy(o.retries, o.backoff_base, o.backoff_max, o.retry_after_max, on_retry, give_up)
        return Retrying(sleep=lambda s: time.sleep(s), **policy)(self._attempt, data)

    def _attempt(self, data: dict[str, str]) -> Any:
        """One POST: the parsed body, `Retryable` (worth another try), or `SparqlError`."""
        t0 = time.perf_counter()
        try:
            resp = self._http.post(self.endpoint, data=data)
        except httpx.TransportError as e:  # unreachable, refused, timed out
            raise Retryable(f"no answer ({type(e).__name__}: {e or 'connection failed'})") from None
        if resp.status_code != 200:
            last = f"HTTP {resp.status_code}: {' '.join(resp.text[:300].split())}"
            if not retryable(resp.status_code):
                raise SparqlError(f"SPARQL endpoint {self.endpoint}: {last} (not retried)")
            raise Retryable(last, resp.headers)
        self.stats.queries += 1
        self.stats.seconds += time.perf_counter() - t0
        try:
            return resp.json()
        except ValueError:
            raise SparqlError(
                f"SPARQL endpoint {self.endpoint}: answered 200 with no JSON: {resp.text[:200]!r}"
            ) from None


def iri(term: str) -> str:
    """A term as SPARQL writes it: ``<iri>``, or a blank node's label as Virtuoso names it."""
    if term.startswith("nodeID://") or term.startswith("_:"):
        return f"<{term}>" if term.startswith("nodeID://") else term
    if any(c in term for c in '<>"{}|^`\\ '):
        raise SparqlError(f"{term!r} is no IRI a SPARQL query can name")
    return f"<{term}>"


def edges_query(entities: Sequence[str], limit: int, direction: int | None = None) -> str:
    """Every edge at each entity, both directions (or ``direction`` only), at most ``limit + 1`` per entity
    and direction in ``?p ?y`` order (the extra row tells a cut hub), literals left out; rows
    ``?x ?d ?p ?y`` (``?d`` 0: ``x p y``, 1: ``y p x``)."""
    parts = []
    for e in entities:
        x = iri(e)
        for d, pattern in ((0, f"{x} ?p ?y . FILTER(!isLiteral(?y))"), (1, f"?y ?p {x} .")):
            if direction is None or d == direction:
                parts.append(
                    f"{{ {{ SELECT ?p ?y WHERE {{ {pattern} }} ORDER BY ?p ?y LIMIT {limit + 1} }} "
                    f"BIND({x} AS ?x) BIND({d} AS ?d) }}"
                )
    return "SELECT ?x ?d ?p ?y WHERE { " + " UNION ".join(parts) + " }"


def _values(entities: Sequence[str]) -> str:
    return " ".join(iri(e) for e in entities)


# ?x's edges a direction as rows ?d ?p ?y (?d 0: x p y, 1: y p x), literals left out
_OUT = "?x ?p ?y . FILTER(!isLiteral(?y)) BIND(0 AS ?d)"
_IN = "?y ?p ?x . BIND(1 AS ?d)"


def edge_counts_query(entities: Sequence[str]) -> str:
    """Each entity's number of edges per direction (rows ``?x ?d ?n``; none for a direction without one),
    literals left out: which of them are hubs, and how many rows their edges are, before any is asked for."""
    values = f"VALUES ?x {{ {_values(entities)} }}"
    return f"SELECT ?x ?d (COUNT(*) AS ?n) WHERE {{ {values} {{ {_OUT} }} UNION {{ {_IN} }} }} GROUP BY ?x ?d"


def all_edges_query(out: Sequence[str], into: Sequence[str]) -> str:
    """Every edge from the entities ``out`` and to the entities ``into``, rows ``?x ?d ?p ?y`` as
    `edges_query` gives them (each entity and direction in ``?p ?y`` order), without a limit: for directions
    counted no larger. A pattern over ``VALUES`` a direction: an endpoint plans it once, where `edges_query`
    is two subqueries an entity (Virtuoso answers 50 entities 5-7 times slower that way)."""
    parts = [f"{{ VALUES ?x {{ {_values(ends)} }} {pattern} }}" for ends, pattern in ((out, _OUT), (into, _IN)) if ends]
    return f"SELECT ?x ?d ?p ?y WHERE {{ {' UNION '.join(parts)} }} ORDER BY ?x ?d ?p ?y"


def batched(items: Sequence[str], size: int) -> list[Sequence[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def literal(text: str, language: str | None = None) -> str:
    """A string as a SPARQL literal (escaped), with a language tag when given."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"' + (f"@{language}" if language else "")


def labels_query(entities: Sequence[str], predicates: Sequence[str], language: str) -> str:
    """The labels of entities (``?e ?p ?l``), in ``language`` or plain."""
    values = " ".join(iri(e) for e in entities)
    preds = " ".join(iri(p) for p in predicates)
    return (
        f"SELECT ?e ?p ?l WHERE {{ VALUES ?e {{ {values} }} VALUES ?p {{ {preds} }} ?e ?p ?l . "
        f'FILTER(isLiteral(?l) && (lang(?l) = "{language}" || lang(?l) = "")) }}'
    )


def named_query(name: str, predicates: Sequence[str], language: str) -> str:
    """The entities a label names (``?e``), first by IRI."""
    preds = " ".join(iri(p) for p in predicates)
    return (
        f"SELECT DISTINCT ?e WHERE {{ VALUES ?p {{ {preds} }} VALUES ?l {{ {literal(name, language)} "
        f"{literal(name)} }} ?e ?p ?l }} ORDER BY ?e LIMIT 20"
    )


def labelled_query(names: Sequence[str], predicates: Sequence[str], language: str) -> str:
    """The entities each of ``names`` labels (``?l ?e``): exact matches, in ``language`` or plain."""
    preds = " ".join(iri(p) for p in predicates)
    lits = " ".join(f"{literal(n, language)} {literal(n)}" for n in names)
    return f"SELECT DISTINCT ?l ?e WHERE {{ VALUES ?p {{ {preds} }} VALUES ?l {{ {lits} }} ?e ?p ?l }}"


def degree_query(entities: Sequence[str]) -> str:
    """Each entity's edges in and out (``?e ?n``), literals left out as a store leaves them."""
    values = " ".join(iri(e) for e in entities)
    return (
        f"SELECT ?e (COUNT(*) AS ?n) WHERE {{ VALUES ?e {{ {values} }} "
        "{ ?e ?p ?o . FILTER(!isLiteral(?o)) } UNION { ?s ?p ?e } } GROUP BY ?e"
    )


def chain_query(topics: Sequence[str], relations: Sequence[str], limit: int) -> str:
    """Every complete walk of ``relations`` from ``topics``, each hop either way (``?d<i>`` 0: forward),
    literals left out; at most ``limit`` walks (one more tells a cut)."""
    values = " ".join(iri(t) for t in topics)
    hops, names = [], ["?x0"]
    for i, r in enumerate(relations, start=1):
        a, b, rel = f"?x{i - 1}", f"?x{i}", iri(r)
        hops.append(
            f"{{ {a} {rel} {b} . BIND(0 AS ?d{i}) }} UNION {{ {b} {rel} {a} . BIND(1 AS ?d{i}) }} "
            f"FILTER(!isLiteral({b}))"
        )
        names += [f"?d{i}", b]
    return f"SELECT DISTINCT {' '.join(names)} WHERE {{ VALUES ?x0 {{ {values} }} {' '.join(hops)} }} LIMIT {limit + 1}"


def exists_query(entity: str) -> str:
    """One edge at the entity, if it has any."""
    x = iri(entity)
    return f"SELECT ?p WHERE {{ {{ {x} ?p ?o }} UNION {{ ?s ?p {x} }} }} LIMIT 1"


def is_iri(name: str) -> bool:
    return "://" in name or name.startswith("_:")


def probe(endpoint: str, options: SparqlOptions | None = None) -> None:
    """Ask the endpoint for one triple before any work (one retry, at most 10 s): `SparqlError`
    naming it when it does not answer, or answers no SPARQL."""
    o = options or SparqlOptions()
    quick = SparqlOptions(graph=o.graph, timeout=min(o.timeout, 10.0), retries=min(o.retries, 1), backoff_base=0.2)
    with SparqlClient(endpoint, quick) as client:
        client.select("SELECT ?s WHERE { ?s ?p ?o } LIMIT 1")
