"""The commands of docs/how-to/score.md, docs/how-to/evaluate-a-run.md, docs/how-to/publish-to-the-hub.md
and docs/how-to/own-kg.md run as written, in a checkout (``train.py``, ``eval.py``, ``conf/`` of this repository),
with only ``<time>`` replaced by the run folder the command before it made.

The two pages that score or export a trained run begin with the same quickstart training line: it runs
once, in one checkout this module shares, and each page's other lines run there. ``my_kg`` is a folder
beside them holding only a test split, with entities and relations the training data never had;
``../shared/data`` is the real fixtures beside the checkout, as in this repository's own folder.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from .conftest import SHARED_DATA
from .doc_blocks import block, blocks, commands
from .test_eval_cli import unseen_test_folder
from .test_own_kg import fixture_rows, questions_without_graphs, union_kg
from .test_readme_commands import _checkout, _env, _run

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCORE = "docs/how-to/score.md"
EVALUATE = "docs/how-to/evaluate-a-run.md"
PUBLISH = "docs/how-to/publish-to-the-hub.md"
OWN_KG = "docs/how-to/own-kg.md"
TRAIN = "python train.py +experiment=subgraphrag_quickstart"


def _ok(line: str, cwd: Path, env: dict):
    done = _run(line, cwd, env)
    assert done.returncode == 0, (line, done.stderr[-3000:])
    return done


@pytest.fixture(scope="module")
def trained(tmp_path_factory, user_cache) -> tuple[Path, dict]:
    """A checkout where the pages' training line has run once, and ``my_kg`` (a test split only)."""
    root = tmp_path_factory.mktemp("doc_trained_runs")
    cwd = _checkout(root / "checkout")
    env = _env(user_cache)
    _ok(TRAIN, cwd, env)
    unseen_test_folder(cwd / "my_kg", n=8)
    return cwd, env


def _questions_of_the_pages(cwd: Path) -> list[dict]:
    """``my_questions`` (webqsp_mini's test rows without graphs) and ``my_plain_questions`` (without topic
    entities either), as the KG pages describe them; the rows."""
    rows = fixture_rows("test")
    questions_without_graphs(cwd / "my_questions", rows)
    questions_without_graphs(cwd / "my_plain_questions", [{**r, "q_entity": []} for r in rows])
    return rows


def _eval_metrics(line: str, cwd: Path, env: dict) -> dict:
    """Run an ``eval.py ... data.kg=...`` line; the metrics.json of the run folder it made."""
    evals = cwd / "outputs" / "eval"
    before = set(evals.iterdir()) if evals.exists() else set()
    done = _ok(line, cwd, env)
    assert "graphs cut" in done.stderr + done.stdout  # the log says what data.kg did
    (run,) = set(evals.iterdir()) - before
    assert "[httpx]" not in (run / "eval.log").read_text()  # no line per request to a SPARQL endpoint
    return json.loads((run / "metrics.json").read_text())


def _lines_after_training(page: str, marker: str) -> list[str]:
    lines = commands(block(page, marker))
    assert lines[0] == TRAIN, f"{page} no longer trains the quickstart first: {lines[0]}"
    return lines[1:]


def _results_of_webqsp_mini_test(path: Path, labels: Path) -> int:
    """A results file for every test question of webqsp_mini: its labelled triples first, then the rest."""
    with gzip.open(labels, "rt") as f:
        labelled = {row["id"]: [tuple(t) for t in row["triples"]] for row in map(json.loads, f)}
    path.parent.mkdir(parents=True)
    n = 0
    with gzip.open(SHARED_DATA / "webqsp_mini" / "test.jsonl.gz", "rt") as f, gzip.open(path, "wt") as out:
        for row in map(json.loads, f):
            graph = [tuple(t) for t in row["graph"]]
            first = [t for t in labelled.get(row["id"], []) if t in set(graph)]
            ranked = first + [t for t in graph if t not in set(first)]
            scores = [1.0 - i / (len(ranked) + 1) for i in range(len(ranked))]
            out.write(json.dumps({"id": row["id"], "triples": [list(t) for t in ranked], "scores": scores}) + "\n")
            n += 1
    return n


def test_recall_of_a_results_file_as_written(tmp_path, user_cache):
    (line,) = commands(block(SCORE, "gsr-train recall"))
    cwd = _checkout(tmp_path / "checkout")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(SHARED_DATA)
    results = cwd / "outputs" / "subgraphrag_webqsp_mini" / "2026-11-27_01-00-00" / "results_test.jsonl.gz"
    n = _results_of_webqsp_mini_test(results, SHARED_DATA / "webqsp_mini" / "gpt_triples_test.jsonl.gz")
    _ok(line, cwd, _env(user_cache))
    figures = json.loads((cwd / "metrics.json").read_text())
    assert figures["questions"] == n == 232
    # every question's labelled triples (20 at most) come first: all of them are found from K = 20 on
    assert figures["overall"]["labelled_recall"]["20"] == 1.0 and figures["overall"]["labelled_recall"]["10"] < 1.0
    assert set(figures["overall"]) >= {"sp_recall", "labelled_recall", "answer_recall"}


def test_eval_of_a_trained_run_as_written(trained):
    cwd, env = trained
    again, test_only, untrained = _lines_after_training(EVALUATE, "python eval.py")
    assert "data.dir=my_kg" in test_only and "data.dir=my_kg" in untrained
    (run,) = (cwd / "outputs" / "subgraphrag_quickstart").iterdir()
    for line in (again, test_only, untrained):
        _ok(line, cwd, env)
    evals = sorted((cwd / "outputs" / "eval").iterdir())
    assert len(evals) == 3
    notes = [json.loads((e / "eval.json").read_text()) for e in evals]
    figures = [json.loads((e / "metrics.json").read_text()) for e in evals]
    assert [(cwd / n["source_run"]).resolve() for n in notes[:2]] == [run.resolve()] * 2
    assert figures[0]["at_k"]["k"] == 100 and figures[0]["split"] == "test" and figures[0]["data"] == "synthetic"
    assert figures[1]["data"] == "my_kg" and figures[1]["questions"] == 8 and figures[1]["split"] == "test"
    assert figures[2]["data"] == "my_kg" and figures[2]["questions"] == 8 and notes[2]["source_run"] is None
    assert all(any(p.name.startswith("results_test") for p in e.iterdir()) for e in evals)
    assert sorted(p.name for p in (cwd / "my_kg").iterdir()) == ["test.jsonl.gz"]  # a test split only


def test_export_and_dry_run_as_written(trained):
    cwd, env = trained
    export, dry_run = _lines_after_training(PUBLISH, "gsr-train export")
    env = {k: v for k, v in env.items() if k != "HF_TOKEN"}
    _ok(export, cwd, env)
    out = cwd / "hub" / "subgraphrag-quickstart"
    assert {"config.json", "model.safetensors", "README.md"} <= {p.name for p in out.iterdir()}
    assert 'from_pretrained("me/subgraphrag-quickstart")' in (out / "README.md").read_text()
    done = _ok(dry_run, cwd, env)
    printed = done.stdout + done.stderr
    assert "model.safetensors" in printed and "me/subgraphrag-quickstart" in printed
    assert "NOT set" in printed  # a dry run needs no token, and uploads nothing


def test_own_kg_page_as_written(trained, monkeypatch):
    """A KG file and questions without graphs (webqsp_mini's, made as the page says) to a trained run's figures;
    the page's Python snippet too, with ``<time>`` filled in."""
    cwd, env = trained
    import_line, evaluate, link, evaluate_linked, ask = _lines_after_training(OWN_KG, "gsr-train import-kg")
    union_kg(cwd / "my_kg.tsv")
    rows = _questions_of_the_pages(cwd)
    assert "40,655 triples" in _ok(import_line, cwd, env).stdout
    runs = [_eval_metrics(line, cwd, env) for line in (evaluate, evaluate_linked)]
    assert [f["data"] for f in runs] == ["my_questions", "my_plain_questions"]
    assert all(f["questions"] == len(rows) and f["split"] == "test" for f in runs)
    given, linked = (f["metrics"]["subgraphrag"]["overall"]["answer_recall"]["10"] for f in runs)
    assert 0 < linked <= given + 0.01 and given - linked < 0.1  # linking loses little
    table = _ok(link, cwd, env).stdout
    assert "| test | 232 | 232 | 0.8836 | 0.9655 |" in table  # the page's figures
    asked = _ok(ask, cwd, env).stdout
    assert "topic entities: Justin Bieber" in asked and "| 1 | " in asked and "| 10 | " in asked
    assert "people.person.nationality | Canada" in asked
    (snippet,) = [b for b in blocks(OWN_KG, lang="python") if "Pipeline.from_run" in b]
    (run,) = (cwd / "outputs" / "subgraphrag_quickstart").iterdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("GSR_TRAIN_CACHE", env["GSR_TRAIN_CACHE"])  # the cache the commands above filled
    scope: dict = {}
    exec(snippet.replace("<time>", run.name), scope)
    answer = scope["answer"]
    assert answer.entities[0][0] == "Justin Bieber" and answer.triples > 0 and len(answer.evidence) == 10


def test_ask_the_quickstart_run_over_a_kg_made_from_the_embedded_benchmark(trained, tmp_path):
    """``Pipeline.from_run(...).ask``: the linked topic, the question's graph cut from the store, the
    run's best triples; warm calls well under a second."""
    import time

    from gsr_train.runs.pipeline import Pipeline

    cwd, env = trained
    rows = _synthetic_store(env, tmp_path)
    (run,) = (cwd / "outputs" / "subgraphrag_quickstart").iterdir()
    pipeline = Pipeline.from_run(run, tmp_path / "store", cache_dir=env["GSR_TRAIN_CACHE"])
    test = rows["test"][:20]
    linked = found = 0
    for row in test:
        t0 = time.perf_counter()
        answer = pipeline.ask(row["question"])
        assert time.perf_counter() - t0 < 1.0 and answer.triples > 0 and len(answer.evidence) == 10
        linked += answer.entities[0][0] in row["q_entity"]
        found += any({e.head, e.tail} & set(row["a_entity"]) for e in answer.evidence)
    assert linked >= 16 and found >= 12, (linked, found)
    given = pipeline.ask(test[0]["question"], entities=test[0]["q_entity"])
    assert [name for name, _ in given.entities] == test[0]["q_entity"]


def _synthetic_store(env: dict, tmp_path: Path) -> dict[str, list[dict]]:
    """``tmp_path/store``: a KG store of the embedded benchmark's graphs; its rows by split."""
    from gsr_train.data.synthetic import ensure_synthetic
    from gsr_train.kg.store_build import import_kg

    folder = ensure_synthetic({}, Path(env["GSR_TRAIN_CACHE"]))
    rows = {}
    for split in ("train", "validation", "test"):
        with gzip.open(folder / f"{split}.jsonl.gz", "rt") as f:
            rows[split] = [json.loads(line) for line in f]
    triples = dict.fromkeys(tuple(t) for split in rows.values() for r in split for t in r["graph"])
    (tmp_path / "kg.tsv").write_text("".join("\t".join(t) + "\n" for t in triples))
    import_kg([tmp_path / "kg.tsv"], tmp_path / "store")
    return rows


def test_ask_with_a_trained_reader(trained, tmp_path):
    """``gsr-train ask ... --reader RUN``: a trained reader run (SmolLM2, LoRA) reads the retriever's
    best triples and answers; a run that is no reader run is one line before any work."""
    from gsr_train.runs.pipeline import Pipeline

    from .test_experiments_e2e import READER_SMALL

    cwd, env = trained
    small = [o for o in READER_SMALL if not o.startswith("qa.eval.max_new_tokens")] + ["qa.eval.max_new_tokens=12"]
    _ok(" ".join(["python train.py +experiment=reader_quickstart", *small]), cwd, env)
    (reader,) = (cwd / "outputs" / "reader_quickstart").iterdir()
    (run,) = (cwd / "outputs" / "subgraphrag_quickstart").iterdir()
    row = _synthetic_store(env, tmp_path)["test"][0]
    line = f'gsr-train ask {run} "{row["question"]}" --kg {tmp_path / "store"} --reader {reader}'
    printed = _ok(line, cwd, env).stdout
    assert "answer: " in printed and "reader said: " in printed and "| 3 | " in printed
    pipeline = Pipeline.from_run(run, tmp_path / "store", cache_dir=env["GSR_TRAIN_CACHE"], reader=reader)
    answer = pipeline.ask(row["question"])
    assert answer.reading is not None and answer.reading.strip() and answer.seconds["read"] > 0
    from gsr_train.readers.prompts import parse_response

    _, inputs = pipeline.reader  # the answers are the reader's response read in its run's prompt format
    assert answer.answers == parse_response(answer.reading, inputs.format)
    wrong = _run(f'gsr-train ask {run} "who" --kg {tmp_path / "store"} --reader {run}', cwd, env)
    assert wrong.returncode == 2 and "not a reader run" in wrong.stderr and "Traceback" not in wrong.stderr


@pytest.mark.virtuoso
def test_ask_over_a_sparql_endpoint_gives_the_stores_answer(trained, tmp_path):
    """``gsr-train ask RUN "q" --kg URL``: the same KG in Virtuoso and in a store (imported from the same
    N-Triples) give the same graph and the same score for each of its triples; the endpoint links the
    question by label lookups."""
    import contextlib
    from urllib.parse import quote

    from gsr_train.data.errors import PreflightError
    from gsr_train.kg.store_build import import_kg
    from gsr_train.runs.pipeline import Pipeline

    from .virtuoso import start_virtuoso

    cwd, env = trained
    rows = _synthetic_store(env, tmp_path)
    triples = [line.split("\t") for line in (tmp_path / "kg.tsv").read_text().splitlines()]
    names = {x for h, _, t in triples for x in (h, t)}
    ent = {n: f"<http://ex.org/e/{quote(n, safe='')}>" for n in names}
    lines = [f"{ent[h]} <http://ex.org/r/{r}> {ent[t]} ." for h, r, t in triples]
    lines += [f'{ent[n]} <http://www.w3.org/2000/01/rdf-schema#label> "{n}"@en .' for n in names if '"' not in n]
    (tmp_path / "load").mkdir()
    (tmp_path / "load" / "kg.nt").write_text("\n".join(lines) + "\n")
    import_kg([tmp_path / "load" / "kg.nt"], tmp_path / "nt_store")
    server = start_virtuoso(tmp_path / "server", tmp_path / "load")
    try:
        server.load(tmp_path / "load", "http://ex.org/kg")
        (run,) = (cwd / "outputs" / "subgraphrag_quickstart").iterdir()
        cache = env["GSR_TRAIN_CACHE"]
        local = Pipeline.from_run(run, tmp_path / "nt_store", cache_dir=cache, top_k=100_000)
        remote = Pipeline.from_run(run, server.endpoint, cache_dir=cache, top_k=100_000)
        linked = 0
        for row in rows["test"][:10]:
            a, b = (p.ask(row["question"], entities=row["q_entity"]) for p in (local, remote))
            assert [n for n, _ in a.entities] == [n for n, _ in b.entities] == row["q_entity"], row["id"]
            assert a.triples == b.triples > 0, row["id"]
            scores = {(e.head, e.relation, e.tail): e.score for e in a.evidence}
            assert {(e.head, e.relation, e.tail): pytest.approx(e.score, abs=2e-3) for e in b.evidence} == scores
            with contextlib.suppress(PreflightError):  # no phrase of the question is a label
                linked += remote.ask(row["question"]).entities[0][0] in row["q_entity"]
        assert linked >= 6, linked
        row = rows["test"][0]
        printed = _ok(f'gsr-train ask {run} "{row["question"]}" --kg {server.endpoint}', cwd, env).stdout
        assert "topic entities: " in printed and "| 10 | " in printed
        wrong = _run(f'gsr-train ask {run} "who" --kg http://127.0.0.1:9/sparql', cwd, env)
        assert wrong.returncode == 2 and "http://127.0.0.1:9/sparql" in wrong.stderr and "Traceback" not in wrong.stderr
    finally:
        server.stop()


SPARQL_PAGE = "docs/how-to/sparql-endpoint.md"
FREEBASE = "http://rdf.freebase.com/ns/"


def freebase_nt(path: Path) -> Path:
    """webqsp_mini's graphs (40,655 triples) as Freebase-shaped N-Triples: mids as ``ns:m.…`` IRIs, a named
    entity as an IRI of its name with its name in ``type.object.name``, relations in the ``ns:`` namespace.

    The edges come in the endpoint's canonical order (sorted by subject, predicate, object), so a store
    imported from the file numbers its edges as the endpoint's cut does: the two cut the same graphs in
    the same order, and the store's evaluation reads the embedding tables the endpoint's made."""
    import re
    from urllib.parse import quote

    mid = re.compile(r"^[mg]\.[0-9a-z_]+$")
    tsv = union_kg(path.with_suffix(".tsv")).read_text().splitlines()
    triples = [line.split("\t") for line in tsv]
    path.with_suffix(".tsv").unlink()
    names = {x for h, _, t in triples for x in (h, t)}
    iri = {n: f"{FREEBASE}{n if mid.match(n) else 'en.' + quote(n.replace(' ', '_'), safe='')}" for n in names}
    edges = sorted((iri[h], f"{FREEBASE}{r}", iri[t]) for h, r, t in triples)
    lines = [f"<{h}> <{r}> <{t}> ." for h, r, t in edges]
    for n in sorted(names):
        if not mid.match(n):
            text = n.replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'<{iri[n]}> <{FREEBASE}type.object.name> "{text}"@en .')
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.virtuoso
def test_sparql_endpoint_page_as_written(trained):
    """The page's commands in order (a Virtuoso database made, loaded and stopped by ``serve-kg``), and the
    same evaluation with the same file imported into a store: equal figures."""
    from .virtuoso import need_virtuoso

    need_virtuoso()
    cwd, env = trained
    serve, evaluate, evaluate_linked, ask, stop = _lines_after_training(SPARQL_PAGE, "gsr-train serve-kg my_kg.nt")
    freebase_nt(cwd / "my_kg.nt")
    rows = _questions_of_the_pages(cwd)

    def figures(line: str) -> dict:
        return _eval_metrics(line, cwd, env)

    try:
        served = _ok(serve, cwd, env).stdout
        assert "SPARQL endpoint: http://localhost:8890/sparql" in served and "loaded" in served
        assert "loaded" not in _ok(serve, cwd, env).stdout  # again: nothing new to load
        remote, linked = figures(evaluate), figures(evaluate_linked)
        asked = _ok(ask, cwd, env).stdout
        assert "topic entities: Justin Bieber" in asked and "| 10 | " in asked
        assert "type.object.name" not in asked and "people.person.nationality" in asked
    finally:
        stopped = _run(stop, cwd, env)
    assert stopped.returncode == 0 and "stopped the database" in stopped.stdout, stopped.stderr[-2000:]
    _ok("gsr-train import-kg my_kg.nt --out my_nt_store", cwd, env)
    local = figures(evaluate.replace("http://localhost:8890/sparql data.sparql.graph=urn:gsr-train:kg", "my_nt_store"))
    last_eval = max((cwd / "outputs" / "eval").iterdir(), key=lambda p: p.name)
    assert "entity texts with" not in (last_eval / "eval.log").read_text()  # the endpoint's graphs, in its order
    recall = [f["metrics"]["subgraphrag"]["overall"]["answer_recall"] for f in (remote, local, linked)]
    assert recall[0] == recall[1] and recall[0]["10"] > 0.3, recall  # the endpoint's figures are the store's
    assert 0 < recall[2]["10"] <= recall[0]["10"] + 0.05
    assert remote["questions"] == local["questions"] == len(rows) and linked["questions"] == len(rows) - 38
