"""A SPARQL endpoint as a KG source: the client's faults (unreachable, timeout, 500, 429 with
Retry-After, 400, malformed answers) against a scripted server, its persistent cache, and a real
Virtuoso database giving the same question graphs as the embedded store imported from the same KG."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from gsr_train.kg.extract import Extractor
from gsr_train.kg.extract_options import ExtractOptions
from gsr_train.kg.sparql import SparqlClient, SparqlError, edges_query
from gsr_train.kg.sparql_extract import SparqlExtractor
from gsr_train.kg.sparql_options import SparqlOptions
from gsr_train.kg.store import open_store
from gsr_train.kg.store_build import import_kg

from .virtuoso import free_port, start_virtuoso

OK = {"head": {"vars": ["a"]}, "results": {"bindings": [{"a": {"type": "uri", "value": "http://ex.org/A"}}]}}


class Scripted:
    """An HTTP server answering each POST with the next of ``replies`` ((status, headers, body, delay));
    the last one repeats. ``asked`` counts the requests, ``most_in_flight`` the most answered at once."""

    def __init__(self, replies):
        self.replies, self.asked = list(replies), 0
        self.in_flight = self.most_in_flight = 0
        outer, lock = self, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with lock:
                    status, headers, body, delay = outer.replies[min(outer.asked, len(outer.replies) - 1)]
                    outer.asked += 1
                    outer.in_flight += 1
                    outer.most_in_flight = max(outer.most_in_flight, outer.in_flight)
                time.sleep(delay)
                with lock:
                    outer.in_flight -= 1
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/sparql"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def client_for(endpoint: str, cache=None, **kw) -> SparqlClient:
    options = SparqlOptions(**{"retries": 2, "backoff_base": 0.01, "backoff_max": 0.05, **kw})
    return SparqlClient(endpoint, options, cache)


def killed_after(server: Scripted, code: str, asked: int) -> int:
    """Run ``code`` in a child Python, kill -9 it once ``server`` has had ``asked`` requests; the count then."""
    import os
    import signal
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 60
    while server.asked < asked and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    return server.asked


@pytest.fixture
def scripted():
    servers = []

    def make(*replies):
        servers.append(Scripted(replies))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def test_a_5xx_is_retried_and_a_429_waits_as_asked(scripted):
    server = scripted((500, {}, b"busy", 0), (429, {"Retry-After": "0.3"}, b"slow down", 0), (200, {}, OK, 0))
    client = client_for(server.endpoint)
    t0 = time.perf_counter()
    assert client.select("SELECT ?a {}") == [{"a": "http://ex.org/A"}]
    assert time.perf_counter() - t0 >= 0.3 and server.asked == 3 and client.stats.retries == 2


def test_the_wait_is_what_the_server_asked_up_to_retry_after_max(scripted, monkeypatch):
    """The retry policy (tenacity) reads ``retry-after-ms`` and ``Retry-After`` and caps them; the client
    sleeps through ``time.sleep``, so the waits can be recorded here."""
    slept, main = [], threading.current_thread()
    real_sleep = time.sleep
    monkeypatch.setattr(
        time, "sleep", lambda s: slept.append(s) if threading.current_thread() is main else real_sleep(s)
    )
    server = scripted((429, {"retry-after-ms": "200"}, b"", 0), (503, {"Retry-After": "999"}, b"", 0), (200, {}, OK, 0))
    client = client_for(server.endpoint, retry_after_max=0.3)
    assert client.select("SELECT ?a {}") == [{"a": "http://ex.org/A"}]
    assert slept == [0.2, 0.3] and client.stats.retries == 2  # backoff alone would wait at most 0.05 s


@pytest.mark.parametrize(
    "reply, says",
    [
        ((500, {}, b"down for good", 0), r"failed after 3 tries; last error: HTTP 500: down for good"),
        ((400, {}, b"syntax error near SELECT", 0), r"HTTP 400: syntax error near SELECT \(not retried\)"),
        ((200, {}, b"<html>not json</html>", 0), r"answered 200 with no JSON"),
        ((200, {}, {"boolean": True}, 0), r"no SPARQL JSON result"),
        ((200, {}, {"results": {"bindings": [{"a": {"type": "uri"}}]}}, 0), r"a result binding without a value"),
        ((200, {}, OK, 1.5), r"failed after 3 tries; last error: no answer \(ReadTimeout"),
    ],
)
def test_a_failing_endpoint_is_one_line_naming_it(scripted, reply, says):
    server = scripted(reply)
    with pytest.raises(SparqlError, match=says) as e:
        client_for(server.endpoint, timeout=0.5).select("SELECT ?a {}")
    assert server.endpoint in str(e.value) and "\n" not in str(e.value)


def test_an_unreachable_endpoint_is_one_line():
    endpoint = f"http://127.0.0.1:{free_port()}/sparql"
    with pytest.raises(SparqlError, match=r"failed after 3 tries; last error: no answer \(ConnectError"):
        client_for(endpoint).select("SELECT ?a {}")
    with pytest.raises(SparqlError, match="is an http"):
        SparqlClient("my_kg_store")


def test_an_answered_query_is_never_asked_again(scripted, tmp_path):
    server = scripted((200, {}, OK, 0))
    first = client_for(server.endpoint, tmp_path)
    first.select_many(["SELECT ?a {1}", "SELECT ?a {2}", "SELECT ?a {1}"])
    first.close()
    again = client_for(server.endpoint, tmp_path)  # another process, later: the cache on disk
    assert again.select_many(["SELECT ?a {1}", "SELECT ?a {2}"]) == [[{"a": "http://ex.org/A"}]] * 2
    assert server.asked == 2 and again.stats.cached == 2 and again.stats.queries == 0
    other_graph = client_for(server.endpoint, tmp_path, graph="http://ex.org/other")
    other_graph.select("SELECT ?a {1}")
    assert server.asked == 3  # another named graph is another question


# ------------------------------------------------------------------ a real database


def random_nt(path: Path, entities=60, relations=5, triples=260, seed=0) -> Path:
    """A random KG as N-Triples in canonical order (head, relation, tail), a label on some entities."""
    rng = np.random.default_rng(seed)
    rows = {
        (f"http://ex.org/e{h}", f"http://ex.org/r{r}", f"http://ex.org/e{t}")
        for h, r, t in zip(*(rng.integers(0, n, triples) for n in (entities, relations, entities)))
    }
    lines = [f"<{h}> <{r}> <{t}> ." for h, r, t in sorted(rows)]
    lines += [
        f'<http://ex.org/e{i}> <http://www.w3.org/2000/01/rdf-schema#label> "Entity {i}"@en .'
        for i in range(0, entities, 3)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def virtuoso_kg(tmp_path_factory):
    root = tmp_path_factory.mktemp("virtuoso")
    nt = random_nt(root / "load" / "kg.nt")
    server = start_virtuoso(root / "server", root / "load")
    try:
        server.load(root / "load", "http://ex.org/kg")
        import_kg([nt], root / "store")
        yield server, open_store(root / "store"), root
    finally:
        server.stop()


@pytest.mark.virtuoso
@pytest.mark.parametrize("max_triples", [5000, 40])  # the whole 2-hop graph; PageRank's cut
def test_graphs_from_virtuoso_are_the_stores(virtuoso_kg, max_triples):
    server, store, root = virtuoso_kg
    options = ExtractOptions(max_triples=max_triples)
    client = SparqlClient(server.endpoint, SparqlOptions(graph="http://ex.org/kg", batch=7), root / "cache")
    remote, local = SparqlExtractor(client, options), Extractor(store, options)
    capped = 0
    for topics in [[f"http://ex.org/e{i}"] for i in range(0, 60, 4)] + [["http://ex.org/e1", "http://ex.org/e2"]]:
        cut = remote.cut(topics)
        ids = np.array([store.entities.get(t) for t in topics])
        edges = local.edges(ids)
        h, r, t = (np.asarray(a[edges], dtype=np.int64) for a in (store.heads, store.rels, store.tails))
        want = list(zip(store.entities.take(h), store.relations.take(r), store.entities.take(t)))
        assert set(cut.triples) == set(want) and not cut.hubs, topics
        capped += cut.reached > max_triples
    assert capped > 0 or max_triples == 5000
    asked, cached = client.stats.queries, client.stats.extra.get("graphs_cached", 0)
    again = SparqlExtractor(client, options)  # a rerun: nothing in memory
    assert again.cut(["http://ex.org/e0"]) == remote.cut(["http://ex.org/e0"])
    assert client.stats.queries == asked  # the second time from the cache
    assert client.stats.extra["graphs_cached"] == cached + 2  # one row a question


@pytest.mark.virtuoso
def test_a_hub_beyond_the_limit_is_cut_and_counted(virtuoso_kg):
    server, store, root = virtuoso_kg
    client = SparqlClient(server.endpoint, SparqlOptions(graph="http://ex.org/kg", limit=3), root / "cache")
    near = SparqlExtractor(client, ExtractOptions(hops=1)).neighbourhood(["http://ex.org/e0"])
    degree = int(store.degree(np.array([store.entities.get("http://ex.org/e0")]))[0])
    assert degree > 6 and near.cut == ["http://ex.org/e0"] and len(near.triples) <= 6
    rows = client.select(edges_query(["http://ex.org/e0"], 3))
    assert len(rows) == 8  # limit + 1 a direction: the extra row is how a cut is seen


@pytest.mark.virtuoso
def test_edges_beyond_the_endpoints_row_cap_are_all_fetched(tmp_path):
    """20 entities of 700 edges each: 14,000 rows, over Virtuoso's cap of 10,000 rows an answer
    (``ResultSetMaxRows``), which cuts one query of them all short without a word. Counted first, they
    are asked in queries of at most ``limit + 1`` rows: every edge arrives, none is a hub."""
    topics = [f"http://ex.org/t{i}" for i in range(20)]
    (tmp_path / "load").mkdir()
    lines = [f"<{t}> <http://ex.org/r> <http://ex.org/leaf{j}> ." for t in topics for j in range(700)]
    (tmp_path / "load" / "kg.nt").write_text("\n".join(lines) + "\n")
    server = start_virtuoso(tmp_path / "server", tmp_path / "load")
    try:
        server.load(tmp_path / "load", "http://ex.org/kg")
        client = SparqlClient(server.endpoint, SparqlOptions(graph="http://ex.org/kg"), tmp_path / "cache")
        assert len(client.select(edges_query(topics, 9999))) == 10_000  # one query for all: cut short
        near = SparqlExtractor(client, ExtractOptions(hops=1)).neighbourhood(topics)
        assert len(near.triples) == 14_000 and near.cut == [] and "directions_cut_short" not in client.stats.extra
    finally:
        server.stop()


def test_a_killed_run_asks_again_only_what_was_not_answered(scripted, tmp_path):
    """kill -9 in the middle of 30 queries, then the same 30 again: what was answered before the kill
    comes from the cache (at most the one query in flight when it died is asked twice)."""
    server = scripted((200, {}, OK, 0.1))
    queries = [f"SELECT ?a {{ {i} }}" for i in range(30)]
    code = (
        "from gsr_train.kg.sparql import SparqlClient\nfrom gsr_train.kg.sparql_options import SparqlOptions\n"
        f"c = SparqlClient({server.endpoint!r}, SparqlOptions(concurrency=1), {str(tmp_path)!r})\n"
        f"c.select_many({queries!r})\n"
    )
    before = killed_after(server, code, 10)
    assert 10 <= before < 30
    again = client_for(server.endpoint, tmp_path)
    assert len(again.select_many(queries)) == 30
    assert again.stats.cached >= before - 1 and server.asked - before == again.stats.queries <= 30 - before + 1


# ------------------------------------------------------------------ data.kg=URL


def question_rows(store, n=12):
    """RoG rows without graphs: topics named by IRI or by label, answers by IRI."""
    rows = []
    for i in range(n):
        e = i * 5
        topic = f"Entity {e}" if e % 3 == 0 else f"http://ex.org/e{e}"  # every third entity has a label
        rows.append(
            {
                "id": f"q{i}",
                "question": f"what about {topic}",
                "answer": ["x"],
                "q_entity": [topic],
                "a_entity": [f"http://ex.org/e{e + 1}"],
            }
        )
    return rows


@pytest.mark.virtuoso
def test_data_kg_as_an_endpoint_writes_the_rows_a_store_writes(virtuoso_kg, tmp_path):
    """ensure_graphs from Virtuoso and from the store imported from the same file: the same rows (topics
    and answers named alike, labels included) and the same graphs; a topic the KG lacks is counted."""
    import pyarrow.parquet as pq

    from gsr_train.kg.extracted_data import SUMMARY_FILE, ensure_graphs

    from .test_own_kg import questions_without_graphs

    server, store, root = virtuoso_kg
    rows = question_rows(store) + [
        {
            "id": "lost",
            "question": "who",
            "answer": [],
            "q_entity": ["http://ex.org/nobody", "Entity 0"],
            "a_entity": [],
        }
    ]
    data = questions_without_graphs(tmp_path / "q", rows)
    options = ExtractOptions(max_triples=60)
    sparql = SparqlOptions(graph="http://ex.org/kg")
    remote = ensure_graphs(data, server.endpoint, ["test"], tmp_path / "cache", options, sparql=sparql)
    local = ensure_graphs(data, root / "store", ["test"], tmp_path / "cache", options)
    a, b = (pq.read_table(f / "test.parquet").to_pylist() for f in (remote, local))
    assert [r["id"] for r in a] == [r["id"] for r in b] == [r["id"] for r in rows]
    for x, y in zip(a, b):
        assert x["q_entity"] == y["q_entity"] and x["a_entity"] == y["a_entity"], x["id"]
        assert {tuple(t) for t in x["graph"]} == {tuple(t) for t in y["graph"]} and x["graph"], x["id"]
    assert a[0]["q_entity"] == ["Entity 0"]  # a label, as the store names it
    figures = json.loads((remote / SUMMARY_FILE).read_text())["splits"]["test"]
    assert figures["unknown_topics"] == 1 and "nobody" in figures["first_unknown_topic"]
    again = ensure_graphs(data, server.endpoint, ["test"], tmp_path / "cache", options, sparql=sparql)
    assert again == remote


@pytest.mark.virtuoso
def test_data_kg_as_an_endpoint_is_checked_before_any_work(virtuoso_kg, tmp_path):
    from omegaconf import open_dict

    from gsr_train.data.errors import PreflightError
    from gsr_train.options.preflight import preflight
    from gsr_train.runtime.run_data import resolve_data_dir

    from .conftest import compose_config
    from .test_own_kg import questions_without_graphs

    server, store, _ = virtuoso_kg
    cfg = compose_config(["+experiment=subgraphrag_webqsp_mini", f"paths.cache_dir={tmp_path / 'cache'}"])
    with open_dict(cfg):
        cfg.data.kg = f"http://127.0.0.1:{free_port()}/sparql"
    with pytest.raises(
        PreflightError, match=r"data.kg: SPARQL endpoint http://127.0.0.1:\d+/sparql: failed after 2 tries"
    ):
        preflight(cfg)
    with open_dict(cfg):
        cfg.data.kg = server.endpoint
        cfg.data.sparql.graph = "http://ex.org/kg"
        cfg.data.dir = str(questions_without_graphs(tmp_path / "q", question_rows(store, 4)))
        cfg.data.splits = ["test"]
    preflight(cfg)
    folder = Path(resolve_data_dir(cfg))
    assert folder.parent == tmp_path / "cache" / "extracted" and (folder / "test.parquet").exists()


def test_an_endpoint_answering_more_rows_than_asked_is_counted_and_cut(scripted, tmp_path, caplog):
    """An endpoint (or a proxy) that ignores LIMIT: the rows beyond the ``limit + 1`` asked for an entity
    and direction are counted, named in one warning with the option, and dropped; the entity is a hub
    (its counts say so, and it is asked with ``LIMIT``)."""

    def edge(d: str, k: int) -> dict:
        uri = {"type": "uri"}
        return {
            "x": {**uri, "value": "http://ex.org/A"},
            "d": {"type": "literal", "value": d},
            "p": {**uri, "value": "http://ex.org/r"},
            "y": {**uri, "value": f"http://ex.org/B{k}"},
        }

    body = {"head": {"vars": ["x", "d", "p", "y"]}, "results": {"bindings": [edge("0", k) for k in range(6)]}}
    body["results"]["bindings"].append(edge("1", 9))
    counted = {
        "head": {"vars": ["x", "d", "n"]},
        "results": {
            "bindings": [
                {"x": {"type": "uri", "value": "http://ex.org/A"}, "d": {"type": "literal", "value": d}, "n": n}
                for d, n in (("0", {"type": "literal", "value": "6"}), ("1", {"type": "literal", "value": "1"}))
            ]
        },
    }
    server = scripted((200, {}, counted, 0), (200, {}, body, 0))  # its edge counts, then its edges
    client = client_for(server.endpoint, tmp_path, limit=2)
    with caplog.at_level("WARNING"):
        near = SparqlExtractor(client, ExtractOptions(hops=1)).neighbourhood(["http://ex.org/A"])
    assert client.stats.extra["rows_beyond_limit"] == 3  # 6 rows for the 3 asked (limit 2 + the hub's row)
    assert near.cut == ["http://ex.org/A"]  # a hub; as a topic it keeps its first `limit` edges
    assert near.triples == sorted(
        [("http://ex.org/A", "http://ex.org/r", f"http://ex.org/B{k}") for k in range(2)]
        + [("http://ex.org/B9", "http://ex.org/r", "http://ex.org/A")]
    )
    (warning,) = [r.getMessage() for r in caplog.records if "beyond" in r.getMessage()]
    assert server.endpoint in warning and "data.sparql.limit=2" in warning


def test_an_endpoint_answering_fewer_edges_than_it_counted_is_counted_and_named(scripted, tmp_path, caplog):
    """An endpoint whose row cap is below ``limit + 1`` (a public one capping answers at 3 rows here): the
    entity's counted 5 edges arrive as 3; the shortfall is counted and named in one warning with the option."""
    uri = {"type": "uri"}
    counted = {
        "head": {"vars": ["x", "d", "n"]},
        "results": {
            "bindings": [{"x": {**uri, "value": "http://ex.org/A"}, "d": {"type": "literal", "value": "0"},
                          "n": {"type": "literal", "value": "5"}}]
        },
    }  # fmt: skip
    rows = [
        {"x": {**uri, "value": "http://ex.org/A"}, "d": {"type": "literal", "value": "0"},
         "p": {**uri, "value": "http://ex.org/r"}, "y": {**uri, "value": f"http://ex.org/B{k}"}}
        for k in range(3)
    ]  # fmt: skip
    server = scripted(
        (200, {}, counted, 0), (200, {}, {"head": {"vars": ["x", "d", "p", "y"]}, "results": {"bindings": rows}}, 0)
    )
    client = client_for(server.endpoint, tmp_path)
    with caplog.at_level("WARNING"):
        near = SparqlExtractor(client, ExtractOptions(hops=1)).neighbourhood(["http://ex.org/A"])
    assert len(near.triples) == 3 and client.stats.extra["directions_cut_short"] == 1
    (warning,) = [r.getMessage() for r in caplog.records if "fewer edges than it counted" in r.getMessage()]
    assert server.endpoint in warning and "data.sparql.limit" in warning


def test_a_rows_names_are_asked_together(scripted, tmp_path):
    """A question's answers are many names: the endpoint is asked for them ``concurrency`` at a time, not one
    after another (1,233 lookups for webqsp_mini's test split), each found as it alone would be."""
    from gsr_train.kg.graph_sources import SparqlGraphs

    server = scripted((200, {}, OK, 0.2))
    graphs = SparqlGraphs(server.endpoint, ExtractOptions(), SparqlOptions(concurrency=4), tmp_path)
    names = [f"answer {i}" for i in range(8)] + ["http://ex.org/A"]
    assert graphs.find(names) == [None] * 8 + ["http://ex.org/A"]  # no row names a label here; the IRI has an edge
    assert server.asked == 9 and server.most_in_flight == 4


# ------------------------------------------------------------------ linking and chains on the endpoint


def _iris(store, ids) -> list[str]:
    return [str(x) for x in store.entities.take(np.asarray(ids, dtype=np.int64))]


@pytest.mark.virtuoso
def test_label_lookup_candidates_from_virtuoso_are_the_stores(virtuoso_kg, tmp_path):
    """The entities a question's phrases label, ranked alike (longer phrase, then degree, then name), from
    the endpoint and from the store; ``link`` takes the first."""
    from gsr_train.kg.graph_sources import SparqlGraphs, StoreGraphs

    server, store, root = virtuoso_kg
    remote = SparqlGraphs(server.endpoint, ExtractOptions(), SparqlOptions(graph="http://ex.org/kg"), tmp_path, True)
    local = StoreGraphs(root / "store", ExtractOptions(), link=False)
    questions = ["what about Entity 12 and entity 30?", "Is entity 3 near Entity 33", "who is nobody", "entity"]
    try:
        for q in questions:
            want = [(_iris(store, [e])[0], phrase) for e, phrase in local.candidates(q)]
            assert remote.candidates(q) == want, q
        got = remote.candidates(questions[0])
        assert {e for e, _ in got[:2]} == {"http://ex.org/e12", "http://ex.org/e30"}  # two-word phrases first
        degree = {e: int(store.degree(np.array([store.entities.get(e)]))[0]) for e, _ in got[:2]}
        assert degree[got[0][0]] >= degree[got[1][0]]  # then the better connected
        assert remote.link(questions[0]) == got[0][0] and remote.link("who is nobody") is None
    finally:
        remote.close()


@pytest.mark.virtuoso
def test_chains_executed_by_virtuoso_are_the_stores(virtuoso_kg, tmp_path):
    """One query per chain: the triples on complete walks and the entities reached equal the store
    walker's, for one-, two- and three-hop chains, both directions, and chains that stop early."""
    from gsr_train.kg.sparql_chains import SparqlChains
    from gsr_train.kg.store_walk import StoreWalker

    server, store, _ = virtuoso_kg
    client = SparqlClient(server.endpoint, SparqlOptions(graph="http://ex.org/kg"), tmp_path)
    chains, walker = SparqlChains(client), StoreWalker(store)
    rng = np.random.default_rng(3)
    heads, rels, tails = (np.asarray(a, dtype=np.int64) for a in (store.heads, store.rels, store.tails))
    checked = valid = 0
    for k in rng.integers(0, store.num_triples, 40).tolist():
        nxt = np.flatnonzero((heads == tails[k]) | (tails == tails[k]))  # a second hop at the tail, either way
        second = int(rels[nxt[rng.integers(0, nxt.size)]])
        for chain in ([int(rels[k])], [int(rels[k]), second], [int(rels[k]), second, int(rels[k])]):
            topics = [int(heads[k])] + ([int(tails[k])] if k % 2 else [])
            walk = walker.chain(np.array(topics), tuple(chain))
            got = chains.chain(_iris(store, topics), [str(store.relations.take([r])[0]) for r in chain])
            e = walk.edges
            want = set(zip(_iris(store, heads[e]), store.relations.take(rels[e]), _iris(store, tails[e])))
            assert set(got.triples) == want and got.ends == sorted(_iris(store, walk.ends)), (topics, chain)
            assert got.valid == walk.valid and not got.truncated
            checked, valid = checked + 1, valid + walk.valid
    assert checked == 120 and 40 <= valid < 120  # complete walks and chains that stop early, both seen
    e0 = store.entities.get("http://ex.org/e0")
    at_e0 = rels[(heads == e0) | (tails == e0)]
    busiest = [str(store.relations.take([int(np.bincount(at_e0).argmax())])[0])]
    whole = chains.chain(["http://ex.org/e0"], busiest)
    short = SparqlChains(client, max_walks=1).chain(["http://ex.org/e0"], busiest)
    assert len(whole.triples) > 1 and not whole.truncated
    assert short.truncated and len(short.triples) == 1 and set(short.triples) < set(whole.triples)


@pytest.mark.virtuoso
def test_data_link_with_an_endpoint_links_by_label(virtuoso_kg, tmp_path):
    from gsr_train.kg.extracted_data import SUMMARY_FILE, ensure_graphs

    from .test_own_kg import questions_without_graphs

    server, store, root = virtuoso_kg
    rows = [{"id": "a", "question": "what about Entity 15", "answer": [], "a_entity": []}]
    data = questions_without_graphs(tmp_path / "q", rows)
    sparql = SparqlOptions(graph="http://ex.org/kg")
    folder = ensure_graphs(
        data, server.endpoint, ["test"], tmp_path / "cache", ExtractOptions(), link=True, sparql=sparql
    )
    import pyarrow.parquet as pq

    (row,) = pq.read_table(folder / "test.parquet").to_pylist()
    assert row["q_entity"] == ["Entity 15"] and row["graph"]
    assert json.loads((folder / SUMMARY_FILE).read_text())["splits"]["test"]["linked"] == 1


@pytest.mark.virtuoso
def test_gsr_on_an_endpoint_retrieves_what_it_retrieves_on_the_store(virtuoso_kg, tmp_path):
    """GSR's beams executed by Virtuoso and on the store: per question the same triples with the same
    scores (the best chain walking each) and the same entities reached; an unknown relation is not
    executable on either."""
    from gsr_train.kg.sparql_chains import SparqlChains
    from gsr_train.retrievers.gsr_kg import gsr_endpoint_retrieve, gsr_store_retrieve

    server, store, _ = virtuoso_kg
    client = SparqlClient(server.endpoint, SparqlOptions(graph="http://ex.org/kg"), tmp_path)
    heads, rels = (np.asarray(a, dtype=np.int64) for a in (store.heads, store.rels))
    rng = np.random.default_rng(5)
    name = [str(x) for x in store.relations.take(np.arange(len(store.relations)))]
    topics, beams = [], []
    for k in rng.integers(0, store.num_triples, 12).tolist():
        topics.append(np.array([heads[k]]))
        chains = [[name[rels[k]]], [name[rels[k]], name[int(rng.integers(0, len(name)))]], ["http://ex.org/none"]]
        beams.append([(c, -float(i)) for i, c in enumerate(chains)] + [(None, -9.0)])
    local = gsr_store_retrieve(store, topics, beams, top_n=3)
    remote = gsr_endpoint_retrieve(SparqlChains(client), [_iris(store, t) for t in topics], beams, top_n=3)
    for q in range(len(topics)):
        e = local.edges[q]
        want = dict(
            zip(zip(_iris(store, heads[e]), [name[r] for r in rels[e]], _iris(store, store.tails[e])), local.scores[q])
        )
        got = dict(zip((remote.triples[i] for i in remote.edges[q]), remote.scores[q]))
        assert got == want and want, q
        assert sorted(remote.answers[q]) == sorted(_iris(store, local.answers[q]))
    assert remote.summary(3)["valid@3"] == local.summary(3)["valid@3"] < 1.0


def test_extraction_killed_mid_hop_asks_again_only_what_was_in_flight(tmp_path):
    """kill -9 while a hop's entity batches are being asked: each batch's entities were kept as its answer
    arrived, so the rerun asks only the batches not answered before the kill (and the one in flight)."""
    empty = {"head": {"vars": ["x", "d", "p", "y"]}, "results": {"bindings": []}}  # no edge: a valid answer
    server = Scripted([(200, {}, empty, 0.1)])
    try:
        topics = [f"http://ex.org/t{i}" for i in range(30)]
        code = (
            "from gsr_train.kg.sparql import SparqlClient\nfrom gsr_train.kg.sparql_options import SparqlOptions\n"
            "from gsr_train.kg.sparql_extract import SparqlExtractor\n"
            f"c = SparqlClient({server.endpoint!r}, SparqlOptions(concurrency=1, batch=1), {str(tmp_path)!r})\n"
            f"SparqlExtractor(c).neighbourhood({topics!r})\n"
        )
        before = killed_after(server, code, 10)
        assert 10 <= before < 30
        client = client_for(server.endpoint, tmp_path, concurrency=1, batch=1)
        near = SparqlExtractor(client).neighbourhood(topics)
        assert near.triples == [] and client.stats.extra["entities_cached"] >= before - 1
        assert server.asked - before <= 30 - before + 1  # the answered batches were not asked again
    finally:
        server.close()
