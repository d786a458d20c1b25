"""The three LLM data steps end to end over loopback (scripted backend, real fixtures)."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gsr_train.llm.server import ScriptedBackend, serve_in_thread
from gsr_train.llm.steps import label_triples, pseudo_questions, select_chains

REPO = Path(__file__).resolve().parents[1]
FAKE_CHAIN = "people.person.made_up_relation -> people.person.other_made_up"


def _rows(path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def _pseudo_questions_config(data, cache, out, **options) -> dict:
    """The pseudo-question step's config on ``data`` (3-part relations, 10 templates, 1 question each),
    written once; ``options`` choose the relations and subjects."""
    return {
        "data": {"dir": str(data)},
        "splits": ["test"],
        "cache_dir": str(cache),
        "min_parts": 3,
        "max_parts": 3,
        "num_templates": 10,
        "questions_per_template": 1,
        "seed": 0,
        "output": str(out),
        "prompt": {"system": "pseudo_questions_system", "user": "pseudo_questions_user"},
        **options,
    }


def _llm(srv, tmp_path, **kw) -> dict:
    cfg = {
        "base_url": srv.base_url,
        "model": "scripted",
        "api_key_env": None,
        "concurrency": 2,
        "cache_path": str(tmp_path / "responses.sqlite"),
        "backoff_base": 0.01,
        "max_retries": 2,
        "log_every": 0,
    }
    cfg.update(kw)
    return cfg


def chain_answer(messages, params) -> str:
    """Pick candidate 1, and on questions with an even number of words also a made-up chain."""
    user = messages[-1]["content"]
    question = re.search(r"Question: (.*)", user).group(1)
    lines = ["1"]
    if len(question.split()) % 2 == 0:
        lines.append(FAKE_CHAIN)
    return "\n".join(lines)


def _chain_cfg(paths_file: Path, out: Path, llm: dict, limit: int = 12) -> dict:
    return {
        "input": str(paths_file),
        "field": "ground_paths",
        "limit": limit,
        "offset": 0,
        "max_candidates": 50,
        "single_candidate": "ask",
        "output": str(out),
        "prompt": {"system": "select_chains_system", "user": "select_chains_user"},
        "llm": llm,
    }


@pytest.fixture(scope="module")
def paths_file(shared_data) -> Path:
    return shared_data / "webqsp_paths" / "train.jsonl.gz"


def test_select_chains_rejects_made_up_chains(paths_file, tmp_path):
    with serve_in_thread(ScriptedBackend(chain_answer)) as srv:
        out = tmp_path / "llm_paths.jsonl.gz"
        summary = select_chains.run(_chain_cfg(paths_file, out, _llm(srv, tmp_path)))
    rows = _rows(out)
    assert [r["id"] for r in rows][:3] == ["WebQTrn-0", "WebQTrn-1", "WebQTrn-3"] and len(rows) == 12
    answered = [r for r in rows if r["status"] == "answered"]
    with_fake = [r for r in answered if len(r["question"].split()) % 2 == 0]
    assert with_fake, "fixture slice should contain questions with an even word count"
    for r in answered:
        assert r["llm_paths"] == r["selected"] == [r["candidates"][0]]
        assert r["raw_response"].startswith("1")
        assert all(c in r["candidates"] for c in r["selected"])
    for r in with_fake:
        assert r["rejected"] == [FAKE_CHAIN]
        assert [c for c in r["selected"] if " -> ".join(c) == FAKE_CHAIN] == []
    c = summary["counts"]
    assert c["chains_rejected"] == len(with_fake) and c["questions_with_rejections"] == len(with_fake)
    assert c["chains_kept"] == len(answered)
    assert c["questions_answered"] + c["questions_without_candidates"] == 12
    on_disk = json.loads((tmp_path / "llm_paths.summary.json").read_text())
    assert on_disk["counts"]["chains_rejected"] == len(with_fake) and on_disk["usage"]["fresh"] == len(answered)


def test_killed_job_resumes_to_the_same_output(paths_file, tmp_path):
    """Kill -9 the Hydra command mid-job, restart: same rows as an uninterrupted run, no request twice."""
    n_done = 5
    backend = ScriptedBackend(chain_answer, block_after=n_done)
    with serve_in_thread(backend) as srv:
        # uninterrupted reference run, own cache and output (the gate is open for it)
        backend.release()
        ref = tmp_path / "ref"
        ref.mkdir()
        select_chains.run(_chain_cfg(paths_file, ref / "out.jsonl.gz", _llm(srv, ref)))
        total = srv.stats.completed
        backend.gate.clear()
        backend.answered = 0
        # the command, killed while requests n_done+1.. hang on the server
        job = tmp_path / "job"
        cmd = [
            sys.executable,
            str(REPO / "data_prep" / "llm_select_chains.py"),
            f"input={paths_file}",
            "limit=12",
            f"output={job / 'out.jsonl.gz'}",
            f"llm.base_url={srv.base_url}",
            "llm.model=scripted",
            f"llm.cache_path={job / 'responses.sqlite'}",
            "llm.concurrency=2",
            "llm.backoff_base=0.01",
            f"hydra.run.dir={job / 'hydra'}",
        ]
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "GSR_TRAIN_CACHE": str(tmp_path / "cache")},
        )
        deadline = time.time() + 60
        while srv.stats.received < total + n_done + 1 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        time.sleep(0.2)  # let the answered requests reach the cache
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not (job / "out.jsonl.gz").exists(), "a killed job must not leave an output behind"
        backend.release()
        before = srv.stats.received
        # restart in-process with the same cache and output path
        summary = select_chains.run(
            _chain_cfg(paths_file, job / "out.jsonl.gz", _llm(srv, job, cache_path=str(job / "responses.sqlite")))
        )
        assert summary["usage"]["cached"] == n_done
        assert summary["usage"]["fresh"] == total - n_done
        assert srv.stats.received - before == total - n_done  # the restart asked only the rest
    assert _rows(job / "out.jsonl.gz") == _rows(ref / "out.jsonl.gz")


def test_previous_output_answers_are_reused_without_cache(paths_file, tmp_path):
    with serve_in_thread(ScriptedBackend(chain_answer)) as srv:
        out = tmp_path / "out.jsonl.gz"
        select_chains.run(_chain_cfg(paths_file, out, _llm(srv, tmp_path, use_cache=False), limit=6))
        first = srv.stats.completed
        summary = select_chains.run(_chain_cfg(paths_file, out, _llm(srv, tmp_path, use_cache=False), limit=6))
        assert srv.stats.completed == first and summary["usage"]["reused_from_output"] == first
    assert all(r["raw_response"] is not None for r in _rows(out) if r["status"] == "answered")


@pytest.fixture(scope="module")
def mini_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("index_cache")


def template_answer(messages, params) -> str:
    relation = re.search(r"Relation: (\S+)", messages[-1]["content"]).group(1)
    word = relation.split(".")[-1].replace("_", " ")
    return (
        "1. What is the " + word + " of [SUBJECT]?\n"
        "2. what is the " + word + " of [subject]\n"  # duplicate after normalisation
        "3. Which " + word + " does [SUBJECT] have?\n"
        "4. Tell me the " + word + ".\n"  # no slot
        "5. [SUBJECT] or [SUBJECT]?\n"
    )  # two slots


def test_pseudo_questions_validated_and_filled_with_kg_subjects(webqsp_mini, mini_cache, tmp_path):
    from gsr_train.kg.index import get_index

    out = tmp_path / "pq.jsonl.gz"
    cfg = _pseudo_questions_config(webqsp_mini, mini_cache, out, relations="index", require_subjects=True, limit=6)
    with serve_in_thread(ScriptedBackend(template_answer)) as srv:
        summary = pseudo_questions.run({**cfg, "llm": _llm(srv, tmp_path)})
        assert srv.stats.completed == 6
    c = summary["counts"]
    assert c["relations"] == 6 and c["templates_kept"] == 12 and c["templates_rejected"] == 18
    assert c["rejected_duplicate"] == c["rejected_no_slot"] == c["rejected_multiple_slots"] == 6
    rows = _rows(out)
    assert len(rows) == 12 and c["pseudo_questions"] == 12
    index = get_index(webqsp_mini, splits=("test",), cache_dir=mini_cache)
    edges = index["test"].global_edges()
    ent, rel = index.entity_lookup(), index.relation_lookup()
    for row in rows:
        assert "[SUBJECT]" not in row["question"] and row["subject"] in row["question"]
        head, r = ent[row["subject"]], rel[row["relation"]]
        assert bool(((edges[:, 0] == head) & (edges[:, 1] == r)).any())  # a real head of that relation
        assert not re.match(r"^[mg]\.[0-9a-z_]+$", row["subject"])
    responses = _rows(tmp_path / "pq.responses.jsonl.gz")
    assert len(responses) == 6 and all(len(r["rejected"]) == 3 and r["raw_response"] for r in responses)


def test_pseudo_questions_cover_every_relation_of_a_file_with_or_without_subjects(webqsp_mini, mini_cache, tmp_path):
    """``relations=file require_subjects=false``: relations the KG has no subject for keep their
    templates, and GSR training fills them with its fallback subject."""
    from gsr_train.datamodules.gsr_indexing import load_index_file
    from gsr_train.datamodules.gsr_indexing import pseudo_questions as make_questions
    from gsr_train.kg.index import get_index

    index = get_index(webqsp_mini, splits=("test",), cache_dir=mini_cache)
    in_kg = sorted(r for r in index.relations if r.count(".") == 2)[:2]
    absent = ["zoos.zoo_animal.enclosure", "astronomy.comet.discoverer"]
    rel_file = tmp_path / "relations.txt"
    rel_file.write_text("\n".join(["zoos", "zoos.zoo_animal", *absent, *in_kg]) + "\n")
    out = tmp_path / "pq_all.jsonl.gz"
    cfg = _pseudo_questions_config(
        webqsp_mini, mini_cache, out, relations="file", relation_file=str(rel_file), require_subjects=False
    )
    with serve_in_thread(ScriptedBackend(template_answer)) as srv:
        summary = pseudo_questions.run({**cfg, "llm": _llm(srv, tmp_path)})
        assert srv.stats.completed == 4  # the domain and type lines are not relations
    c = summary["counts"]
    assert c["relations"] == 4 and c["pseudo_questions"] == 4 and c["templates_without_subject"] == 4
    rows = _rows(out)
    assert {r["relation"] for r in rows if "question" in r} == set(in_kg)
    assert {r["relation"] for r in rows if "question" not in r} == set(absent)
    sources = load_index_file(out)
    examples = make_questions(absent, {}, sources, per_relation=4)
    assert {e.relation for e in examples} == set(absent)
    assert all("the zoo animal" in e.text or "the comet" in e.text for e in examples)
    assert any(e.text.startswith("what is the enclosure of the zoo animal") for e in examples)


def label_answer(messages, params) -> str:
    """Copy the first two offered triples and invent one."""
    offered = re.findall(r"^\((.*)\)$", messages[-1]["content"], re.M)
    return "\n".join(
        [f"evidence: ({t})" for t in offered[:2]] + ["evidence: (Nowhere, location.location.contains, Atlantis)"]
    )


def test_label_triples_output_is_read_by_the_label_loader(webqsp_mini, mini_cache, tmp_path):
    from gsr_train.eval.labels import load_labelled_triples
    from gsr_train.kg.index import get_index

    out = tmp_path / "labels_test.jsonl.gz"
    cfg = {
        "data": {"dir": str(webqsp_mini)},
        "split": "test",
        "cache_dir": str(mini_cache),
        "num_candidates": 40,
        "max_triples": 20,
        "limit": 5,
        "output": str(out),
        "prompt": {"system": "label_triples_system", "user": "label_triples_user"},
    }
    with serve_in_thread(ScriptedBackend(label_answer)) as srv:
        summary = label_triples.run({**cfg, "llm": _llm(srv, tmp_path)})
    c = summary["counts"]
    assert c["questions_answered"] == 5 and c["triples_kept"] == 10 and c["triples_rejected"] == 5
    rows = _rows(out)
    index = get_index(webqsp_mini, splits=("test",), cache_dir=mini_cache)
    for i, row in enumerate(rows):
        assert row["triples"] == index.triple_strings("test", i)[:2]
        assert row["rejected"] == ["(Nowhere, location.location.contains, Atlantis)"]
    labelled, questions, stats = load_labelled_triples(out, index, "test")
    assert int(labelled.sum()) == 10 and int(questions.sum()) == 5

    # candidates from a retrieval-result file: only its top triples are offered
    retrieval = tmp_path / "results.jsonl"
    with open(retrieval, "w") as f:
        for i in range(3):
            trips = index.triple_strings("test", i)[5:8]
            f.write(json.dumps({"id": index["test"].ids[i], "triples": trips, "scores": [3.0, 2.0, 1.0]}) + "\n")
    with serve_in_thread(ScriptedBackend(label_answer)) as srv:
        summary = label_triples.run(
            {
                **cfg,
                "retrieval": str(retrieval),
                "limit": 3,
                "output": str(tmp_path / "r.jsonl"),
                "llm": _llm(srv, tmp_path),
            }
        )
    rows = [json.loads(x) for x in open(tmp_path / "r.jsonl")]
    assert [r["triples"] for r in rows] == [index.triple_strings("test", i)[5:7] for i in range(3)]
    assert all(r["num_candidates"] == 3 for r in rows)


def test_select_chains_from_dataset_supervision(webqsp_mini, mini_cache, tmp_path):
    """Candidates from the shortest-path chains of a RoG dataset (gsr_train.kg.paths)."""
    from gsr_train.kg.index import get_index
    from gsr_train.kg.paths import chains_to_names, get_supervision

    out = tmp_path / "ds.jsonl.gz"
    cfg = {
        "data": {"dir": str(webqsp_mini)},
        "split": "test",
        "chains": "raw",
        "cache_dir": str(mini_cache),
        "limit": 6,
        "max_candidates": None,
        "output": str(out),
        "prompt": {"system": "select_chains_system", "user": "select_chains_user"},
    }
    with serve_in_thread(ScriptedBackend(chain_answer)) as srv:
        select_chains.run({**cfg, "llm": _llm(srv, tmp_path)})
    index = get_index(webqsp_mini, splits=("test",), cache_dir=mini_cache)
    names = chains_to_names(get_supervision(index, "test", mini_cache).chains_raw, index)
    rows = _rows(out)
    assert [r["id"] for r in rows] == index["test"].ids[:6]
    for r, chains in zip(rows, names):
        assert r["candidates"] == [list(c) for c in dict.fromkeys(chains) if c]
        assert r["llm_paths"] == r["candidates"][:1]
