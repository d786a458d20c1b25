"""OKGQA in its own setting: its question file (DBpedia entities, no RoG rows) against a SPARQL endpoint
that holds those entities. A real Virtuoso is loaded with a small DBpedia-shaped KG the test writes (labels,
abstracts, types, links between the named entities, a second hop); ``python train.py
+experiment=okgqa_open_ended open_ended.questions=<csv> data.kg=<endpoint>`` cuts each question's graph
from it and runs the open-ended evaluation against the scripted judge (tests/open_ended_helpers.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gsr_train.llm.server import ScriptedBackend, serve_in_thread
from gsr_train.openended.kg_questions import entity_iri, question_rows
from gsr_train.openended.questions import load_questions

from .conftest import REPO
from .open_ended_helpers import judge
from .test_open_questions import OKGQA_HEADER, _okgqa_row, _write_csv
from .virtuoso import start_virtuoso

DBR = "http://dbpedia.org/resource/"
DBO = "http://dbpedia.org/ontology/"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
CLASSES = ("Person", "Place", "Organisation", "Event", "TopicalConcept")


def _literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"@en'


def dbpedia_nt(names: list[str], path: Path) -> Path:
    """A DBpedia-shaped KG around ``names`` (resource names): each entity labelled, typed, abstracted (a
    literal: left out of graphs), linked to the next named entity and to a topic that has a country (the
    second hop), and the author of a work of its own."""
    lines = []
    for i, name in enumerate(names):
        e, label = f"<{entity_iri(name, DBR)}>", name.replace("_", " ")
        other = f"<{entity_iri(names[(i + 1) % len(names)], DBR)}>"
        topic, work = f"<{DBR}Topic_{i % 7}>", f"<{entity_iri(name + '_(work)', DBR)}>"
        lines += [
            f"{e} <{RDFS_LABEL}> {_literal(label)} .",
            f"{e} <{DBO}abstract> {_literal(label + ' is a thing of the test KG.')} .",
            f"{e} <{RDF_TYPE}> <{DBO}{CLASSES[i % len(CLASSES)]}> .",
            f"{e} <{DBO}wikiPageWikiLink> {other} .",
            f"{e} <{DBO}field> {topic} .",
            f"{work} <{DBO}author> {e} .",
            f"{work} <{RDFS_LABEL}> {_literal(label + ' (work)')} .",
        ]
    for k in range(7):
        lines += [
            f"<{DBR}Topic_{k}> <{DBO}country> <{DBR}Country_{k % 3}> .",
            f"<{DBR}Topic_{k}> <{RDFS_LABEL}> {_literal(f'Topic {k}')} .",
            f"<{DBR}Country_{k % 3}> <{RDFS_LABEL}> {_literal(f'Country {k % 3}')} .",
        ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(dict.fromkeys(lines)) + "\n", encoding="utf-8")
    return path


def okgqa_file(tmp_path: Path) -> Path:
    """OKGQA's layout: four questions (one naming an entity the KG lacks beside one it has, one naming
    an entity the KG lacks alone), and a row listing no entity, as six rows of the real file do."""
    rows = [
        _okgqa_row(0, "Please describe Marie Curie's contributions to chemistry.", "descriptive", {"p": "Marie_Curie"}),
        _okgqa_row(
            1,
            "Compare and contrast the economic policies of Ronald Reagan and Margaret Thatcher.",
            "comparative",
            {"entity A": "Ronald_Reagan", "entity B": "Margaret_Thatcher"},
        ),
        _okgqa_row(2, "Why is the Internet significant to education?", "explanatory", {"e": "Internet", "f": "Nope"}),
        _okgqa_row(3, "What do you predict for Atlantis?", "predictive", {"place": "Atlantis_(lost)"}),
        [4, "How will solar power develop?", "predictive", "{'t': 'solar power'}", "high", "medium", "{}", 4, "{}"],
    ]
    return _write_csv(tmp_path / "filtered_questions_v3.csv", OKGQA_HEADER, rows)


def _train(run: Path, url: str, questions: Path, endpoint: str, *extra: str) -> subprocess.CompletedProcess:
    """The how-to's command, with the scripted judge and the hashing encoder in place of SmolLM2 and MiniLM."""
    args = [
        "+experiment=okgqa_open_ended",
        f"open_ended.questions={questions}",
        "open_ended.skip_no_entity=true",
        f"data.kg={endpoint}",
        f"llm.base_url={url}",
        "llm.model=scripted",
        "llm.autostart=null",
        "encoder.name=hashing",
        "+encoder.dim=32",
        "logger=none",
        "open_ended.geval.samples=2",
        f"hydra.run.dir={run}",
        *extra,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    env["GSR_TRAIN_CACHE"] = str(run.parent / "cache")
    return subprocess.run(
        [sys.executable, "train.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def dbpedia(tmp_path_factory):
    """Virtuoso holding the KG around the entities of the test's file and, when ``GSR_OKGQA_CSV`` names
    it, of OKGQA's own file."""
    root = tmp_path_factory.mktemp("dbpedia")
    names = {e for q in load_questions(okgqa_file(root), skip_no_entity=True)[0] for e in q.entities}
    names -= {"Nope", "Atlantis_(lost)"}
    if os.environ.get("GSR_OKGQA_CSV"):
        names |= {e for q in load_questions(os.environ["GSR_OKGQA_CSV"], skip_no_entity=True)[0] for e in q.entities}
    dbpedia_nt(sorted(names), root / "load" / "dbpedia.nt")
    server = start_virtuoso(root / "server", root / "load")
    try:
        server.load(root / "load", "http://dbpedia.org")
        yield server
    finally:
        server.stop()


def test_entity_names_become_dbpedias_iris(tmp_path):
    assert entity_iri("Marie_Curie", DBR) == DBR + "Marie_Curie"
    assert entity_iri("Financial crisis of 2007–08", DBR) == DBR + "Financial_crisis_of_2007–08"  # Unicode kept
    assert entity_iri('A"b{c}', DBR) == DBR + "A%22b%7Bc%7D"
    assert entity_iri("http://example.org/x", DBR) == "http://example.org/x"
    assert entity_iri("Marie_Curie", "") == "Marie Curie"  # no prefix: the label
    questions = load_questions(okgqa_file(tmp_path), skip_no_entity=True)[0]
    rows = question_rows(questions, DBR)
    assert rows[1]["q_entity"] == [DBR + "Ronald_Reagan", DBR + "Margaret_Thatcher"] and rows[1]["id"] == "1"


@pytest.mark.virtuoso
def test_okgqa_questions_run_end_to_end_against_an_endpoint(dbpedia, tmp_path):
    """Each question's graph is cut from Virtuoso around its DBpedia entities (labels as names, literals
    left out, two hops); a question none of whose entities the KG holds is one line naming
    data.skip_invalid, or counted with it; metrics.json holds FActScore and G-Eval rows."""
    questions = okgqa_file(tmp_path)
    with serve_in_thread(ScriptedBackend(judge), "scripted") as srv:
        refused = _train(tmp_path / "refused", srv.base_url, questions, dbpedia.endpoint)
        assert refused.returncode == 2, refused.stderr[-3000:]
        last = refused.stderr.strip().splitlines()[-1]
        assert "'3'" in last and "data.skip_invalid=true" in last and "Atlantis_(lost)" in last, last
        asked = srv.stats.received
        done = _train(tmp_path / "run", srv.base_url, questions, dbpedia.endpoint, "data.skip_invalid=true")
        assert done.returncode == 0, done.stderr[-3000:]
        assert asked == 0  # refused before the judge was asked anything
    doc = json.loads((tmp_path / "run" / "metrics.json").read_text())
    rows = {r["condition"]: r for r in doc["rows"]}
    assert set(rows) == {"none", "triplets"}
    assert doc["dataset"]["name"] == f"filtered_questions_v3.csv on {dbpedia.endpoint}"
    details = doc
    triplets = details["conditions"]["triplets"]
    assert triplets["answered"] == 3 and triplets["llm"]["hallucination_ratio"] == 0.0
    assert details["conditions"]["none"]["llm"]["hallucination_ratio"] == 1.0
    assert triplets["geval"]["correctness"] == pytest.approx(4.2)
    assert details["questions"]["skipped_no_entity"] == 1 and details["questions"]["studied"] == 3
    log = (tmp_path / "run" / "train.log").read_text()  # what became of every row, in one line
    assert (
        f"open_ended.questions={questions}: 3 of 5 questions used (1 no entity, 1 not in kg skipped, counted in" in log
    )
    (extracted,) = [f for f in (tmp_path / "cache" / "extracted").iterdir() if not f.name.startswith(".")]
    graphs = {r["id"]: r for r in pq.read_table(extracted / "test.parquet").to_pylist()}
    assert sorted(graphs) == ["0", "1", "2"]
    curie = {tuple(t) for t in graphs["0"]["graph"]}
    assert ("Marie Curie (work)", f"{DBO}author", "Marie Curie") in curie
    assert any(h.startswith("Topic ") and t.startswith("Country ") for h, _, t in curie)  # the second hop
    assert not any("thing of the test KG" in t for _, _, t in curie)  # literals left out
    assert graphs["0"]["q_entity"] == ["Marie Curie"] and graphs["2"]["q_entity"] == ["Internet"]
    summary = json.loads((extracted / "extract.json").read_text())["splits"]["test"]
    assert summary["skipped"] == 1 and summary["unknown_topics"] == 2  # Nope, Atlantis_(lost)


@pytest.mark.virtuoso
@pytest.mark.skipif(
    not os.environ.get("GSR_OKGQA_CSV"), reason="set GSR_OKGQA_CSV to OKGQA's filtered_questions_v3.csv"
)
def test_okgqas_own_question_file_runs_end_to_end_against_an_endpoint(dbpedia, tmp_path):
    with serve_in_thread(ScriptedBackend(judge), "scripted") as srv:
        done = _train(tmp_path / "run", srv.base_url, Path(os.environ["GSR_OKGQA_CSV"]), dbpedia.endpoint)
        assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "run" / "metrics.json").read_text())
    details = doc
    assert details["questions"]["skipped_no_entity"] == 6 and details["questions"]["studied"] == 50
    assert details["conditions"]["triplets"]["answered"] == 50
    assert {r["condition"] for r in doc["rows"]} == {"none", "triplets"}


def test_the_pages_okgqa_command_runs_as_written_offline(tmp_path):
    """The how-to's OKGQA command names DBpedia's public endpoint; offline (CI), it is one line naming
    the endpoint and exit status 2, before the LLM server starts or any question is read."""
    import httpx

    from .doc_blocks import block, commands
    from .test_readme_commands import _argv

    try:
        httpx.get("https://dbpedia.org/sparql", timeout=3)
    except httpx.TransportError:
        pass
    else:
        pytest.skip("dbpedia.org answers: this checks the command offline")
    (line,) = commands(block("docs/how-to/sparql-endpoint.md", "+experiment=okgqa_open_ended"))
    okgqa_file(tmp_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "GSR_TRAIN_CACHE": str(tmp_path / "cache")}
    argv = [str(REPO / w) if w == "train.py" else w for w in _argv(line, tmp_path)]  # run where the file is
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    (last,) = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert "data.kg: SPARQL endpoint https://dbpedia.org/sparql" in last and "Traceback" not in done.stderr
