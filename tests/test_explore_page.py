"""gsr-train explore: docs/how-to/explore-a-run.md runs as written, and its pages work in a real browser
(headless Chromium driven by Selenium): every test question listed, the failures filtered, a question's
graph drawn with the ranks of the results file, two runs' paired table clicked. Bad inputs are one line.

Chromium and its driver are Debian packages (``chromium``, ``chromium-driver``); ``.ci/run`` installs
them, and the browser tests skip with one line where they are missing."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from .browser import chromium, count, open_page, settled, shown
from .conftest import REPO
from .doc_blocks import blocks, commands
from .test_compare_runs_doc import _argv

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PAGE = "docs/how-to/explore-a-run.md"
SCREENSHOT = REPO / "docs" / "figures" / "explore_question.png"


def _env(cache: Path) -> dict:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
        "GSR_TRAIN_CACHE": str(cache),
    }


def _explore(cwd: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gsr_train.cli", "explore", *args],
        cwd=cwd,
        env=_env(cache),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def look(tmp_path_factory, user_cache) -> Path:
    """The page's commands, run as written in a checkout: two trained runs and their two pages."""
    cwd = tmp_path_factory.mktemp("look")
    for name in ("train.py", "eval.py", "conf"):
        (cwd / name).symlink_to(REPO / name)
    lines = [line for body in blocks(PAGE) for line in commands(body)]
    assert len(lines) == 5 and lines[3] == "gsr-train explore outputs/look/subgraphrag", lines
    for line in lines:
        done = subprocess.run(_argv(line), cwd=cwd, env=_env(user_cache), capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, (line, done.stderr[-3000:])
    return cwd


def test_the_page_runs_as_written(look):
    runs = look / "outputs" / "look"
    for page in (runs / "subgraphrag" / "explore_test.html", runs / "three_runs.html"):
        text = page.read_text()
        assert "<script src=" not in text and "<link " not in text and 'src="http' not in text  # nothing fetched
        assert 'id="summary"' in text and 'id="chunk-0"' in text


def _results(run: Path) -> dict[str, list]:
    return {qid: row["triples"] for qid, row in _rows(run).items()}


def _questions(run: Path, row: int = 0) -> tuple[list[str], dict[str, list]]:
    doc = [json.loads(line) for line in (run / "questions.jsonl").read_text().splitlines()][row]
    return doc["ids"], {m: spec["values"] for m, spec in doc["metrics"].items() if spec["kind"] == "mean"}


def _index(run: Path, cache: Path, monkeypatch):
    """The run's KG index, opened as the run opened it (from the user's cache)."""
    from omegaconf import OmegaConf

    from gsr_train.config import register_resolvers
    from gsr_train.runtime.run_data import load_kg_index

    monkeypatch.setenv("GSR_TRAIN_CACHE", str(cache))
    register_resolvers()
    return load_kg_index(OmegaConf.load(run / ".hydra" / "config.yaml"))


def _answers(index) -> dict[str, set[str]]:
    """Each test question's answer entities in its graph."""
    g = index["test"]
    return {
        g.ids[i]: set(index.entities.take(g.graph(i).entity_ids[g.graph(i).answer_mask].numpy())) for i in range(len(g))
    }


# ------------------------------------------------------------------------------ the browser


@pytest.fixture(scope="module")
def browser():
    driver = chromium()
    yield driver
    driver.quit()


def test_a_question_in_chromium(look, browser, user_cache, monkeypatch):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run = look / "outputs" / "look" / "subgraphrag"
    ids, values = _questions(run)
    open_page(browser, run / "explore_test.html")
    assert count(browser) == len(ids) == 300 and browser.get_log("browser") == []
    # failed only: the questions whose answer_recall@10 is 0 in questions.jsonl
    Select(browser.find_element(By.ID, "filter")).select_by_value("failed")
    settled(browser)
    failed = [q for q, v in zip(ids, values["answer_recall@10"]) if v == 0]
    assert count(browser) == len(failed) > 0 and shown(browser) == failed[:100]
    # open the first failure: its drawing and its ranks are the results file's
    first = failed[0]
    browser.find_element(By.CSS_SELECTOR, f'tr.question[data-id="{first}"]').click()
    settled(browser)
    assert first in browser.find_element(By.ID, "question-title").text
    triples, answers = _results(run)[first], _answers(_index(run, user_cache, monkeypatch))[first]
    rank = next((i + 1 for i, t in enumerate(triples) if t[0] in answers or t[2] in answers), None)
    cell = browser.find_element(By.CSS_SELECTOR, "#question-figures td[data-first]")
    assert cell.get_attribute("data-first") == ("" if rank is None else str(rank)) and (rank is None or rank > 10)
    listed = browser.execute_script(
        "return [...document.querySelectorAll('table.triples[data-view=\"0\"] tr')].slice(1, 6)"
        ".map(r => [...r.cells].slice(0, 4).map(c => c.textContent))"
    )
    assert listed == [[str(i + 1), *triples[i]] for i in range(5)]
    edges = browser.find_elements(By.CSS_SELECTOR, "#graph .edge.v0")
    assert len(edges) >= 10 and sorted(int(e.get_attribute("data-rank")) for e in edges)[:10] == list(range(1, 11))
    assert browser.find_elements(By.CSS_SELECTOR, "#graph .node.topic")
    browser.find_element(By.ID, "question").screenshot(
        str(SCREENSHOT if os.environ.get("GSR_WRITE_SCREENSHOT") else look / "shot.png")
    )
    # the state is in the address: the same view opens from the link
    open_page(browser, run / "explore_test.html", f"#filter=failed&q={first}")
    assert count(browser) == len(failed) and first in browser.find_element(By.ID, "question-title").text


def test_three_runs_side_by_side_in_chromium(look, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    runs = look / "outputs" / "look"
    open_page(browser, runs / "three_runs.html")
    labels = browser.execute_script("return [...document.querySelectorAll('#focus option')].map(o => o.textContent)")
    assert labels == [
        "A subgraphrag",
        "A cosine",
        "B subgraphrag",
        "B cosine",
        "C gsr unconstrained raw",
        "C gsr constrained raw",
    ]
    # gsr-train compare's paired table, A vs B, made clickable: a row lists the questions behind its difference
    row = browser.find_element(
        By.CSS_SELECTOR, 'tr.paired-row[data-focus="0"][data-other="2"][data-metric="answer_recall@10"]'
    )
    direction = row.get_attribute("data-filter")  # the row is drawn again once clicked
    row.click()
    settled(browser)
    ids, full = _questions(runs / "subgraphrag")
    _, one = _questions(runs / "one_epoch")
    a, b = full["answer_recall@10"], dict(zip(_questions(runs / "one_epoch")[0], one["answer_recall@10"]))
    better = [q for q, x in zip(ids, a) if x is not None and b[q] is not None and x > b[q]]
    worse = [q for q, x in zip(ids, a) if x is not None and b[q] is not None and x < b[q]]
    want = better if direction == "better" else worse
    assert count(browser) == len(want) > 0 and shown(browser) == want[:100]
    assert (
        "share no row" in browser.find_element(By.ID, "pairs").text
        or "no rows of the same" in browser.find_element(By.ID, "pairs").text
    )
    # SubgraphRAG against GSR: answer_hit@10 from both rankings; GSR better on the listed questions
    Select(browser.find_element(By.ID, "other")).select_by_value("4")
    settled(browser)
    Select(browser.find_element(By.ID, "metric")).select_by_value("answer_hit@10")
    settled(browser)
    Select(browser.find_element(By.ID, "filter")).select_by_value("all")
    settled(browser)
    browser.find_element(By.ID, "pair-worse").click()
    settled(browser)
    listed = shown(browser)
    assert listed and count(browser) == int(browser.find_element(By.ID, "pair-worse").text.rsplit(": ", 1)[1])
    sg, gsr = _results(runs / "subgraphrag"), _results(runs / "gsr")
    first = listed[0]
    browser.find_element(By.CSS_SELECTOR, f'tr.question[data-id="{first}"]').click()
    settled(browser)
    ranks = browser.execute_script(
        "return [...document.querySelectorAll('#question-figures tr')].slice(1).map(r => r.cells[1].dataset.first)"
    )
    assert (ranks[0] == "" or int(ranks[0]) > 10) and 1 <= int(ranks[4]) <= 10, ranks
    assert len(gsr[first]) >= 1 and len(sg[first]) >= 10
    assert browser.find_elements(By.CSS_SELECTOR, "ul.chains li"), "GSR's chains are listed"
    assert browser.find_elements(By.CSS_SELECTOR, "#graph .edge.v1, #graph .edge.both")  # GSR's retrieval drawn


def test_a_gsr_run_alone_in_chromium(look, browser, user_cache):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run = look / "outputs" / "look" / "gsr"
    done = _explore(look, user_cache, str(run))
    assert done.returncode == 0, done.stderr[-2000:]
    open_page(browser, run / "explore_test.html")
    ids, values = _questions(run)
    assert count(browser) == len(ids) and browser.find_element(By.ID, "metric").get_attribute("value") == "match@1"
    Select(browser.find_element(By.ID, "filter")).select_by_value("failed")
    settled(browser)
    failed = [q for q, v in zip(ids, values["match@1"]) if v == 0]
    assert count(browser) == len(failed) > 0 and shown(browser) == failed[:100]
    rows = _rows(run)
    pick = next(q for q in failed if rows[q].get("chains") and rows[q]["triples"])  # walked, no answer reached
    open_page(browser, run / "explore_test.html", f"#filter=failed&q={pick}")
    chains = [row["chain"] for row in rows[pick]["chains"]]
    listed = browser.execute_script(
        "return [...document.querySelectorAll('ul.chains[data-view=\"0\"] li')].map(li => li.textContent)"
    )
    assert len(listed) == min(len(chains), 10) and all(" > ".join(c) in text for c, text in zip(chains, listed))
    assert browser.find_elements(By.CSS_SELECTOR, "#graph .edge.v0, #graph .edge.both")  # its triples drawn


def _rows(run: Path) -> dict[str, dict]:
    with gzip.open(run / "results_test.jsonl.gz", "rt") as f:
        return {row["id"]: row for row in map(json.loads, f)}


# ------------------------------------------------------------------------------ no browser needed


def test_read_ranked_matches_the_results_file(look, user_cache, monkeypatch):
    from gsr_train.explore.ranked import read_ranked

    run = look / "outputs" / "look" / "subgraphrag"
    index = _index(run, user_cache, monkeypatch)
    ranked = read_ranked(run / "results_test.jsonl.gz", index, "test", 5)
    first = dict(zip(index["test"].ids, ranked.first_answer.tolist()))
    answers, results = _answers(index), _results(run)
    for qid, triples in results.items():
        want = next((i for i, t in enumerate(triples) if t[0] in answers[qid] or t[2] in answers[qid]), -1)
        assert first[qid] == want, qid
    assert ranked.rank.size == int((ranked.edge >= 0).sum()) == 5 * len(results)  # every kept triple is an edge


def test_a_reader_view_shows_its_answers(look, user_cache, tmp_path):
    """A reader's row (its predictions file) is a view of its own: the answer column and its hit."""
    run = tmp_path / "reader_run"
    shutil.copytree(look / "outputs" / "look" / "subgraphrag", run)
    ids, _ = _questions(run)
    rows = [
        {"id": q, "prediction": [f"answer of {q}"], "response": f"ans: answer of {q}", "answers": ["x"]} for q in ids
    ]
    (run / "predictions_test_rd.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    doc = json.loads((run / "metrics.json").read_text())
    doc["rows"].append(
        {
            "method": "my_reader",
            "split": "test",
            "k": 10,
            "checkpoint": None,
            "results": "predictions_test_rd.jsonl",
            "variant": "rd",
            "metrics": {"hit": 0.0},
        }
    )
    (run / "metrics.json").write_text(json.dumps(doc))
    done = _explore(look, user_cache, str(run))
    assert done.returncode == 0, done.stderr[-2000:]
    html = (run / "explore_test.html").read_text()
    assert "A my_reader rd" not in html  # the summary is compressed, not plain text
    code = (
        "import base64,gzip,json,re,sys; t=open(sys.argv[1]).read(); "
        "s=re.search(r'id=\"summary\">([^<]*)<', t).group(1); d=json.loads(gzip.decompress(base64.b64decode(s))); "
        "v=[x for x in d['views'] if x['kind']=='predictions'][0]; print(json.dumps([v['label'], v['answer'][:2]]))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(run / "explore_test.html")], capture_output=True, text=True)
    label, answers = json.loads(out.stdout)
    assert label == "A my_reader rd" and answers == [f"answer of {ids[0]}", f"answer of {ids[1]}"]


def _copy(source: Path, to: Path) -> Path:
    shutil.copytree(source, to, ignore=shutil.ignore_patterns("explore_*.html"))
    return to


def _one_line(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: gsr-train explore:"), done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_bad_inputs_are_one_line_each(look, user_cache, tmp_path):
    source = look / "outputs" / "look" / "subgraphrag"
    _one_line(_explore(look, user_cache, str(tmp_path / "nowhere")), "no such run folder")
    _one_line(_explore(look, user_cache, str(look / "conf")), "no metrics.json")
    _one_line(_explore(look, user_cache, str(source), "--split", "val"), "no rows of split 'val'", "it has: test")
    truncated = tmp_path / "truncated"
    _copy(source, truncated)
    data = (truncated / "results_test.jsonl.gz").read_bytes()
    (truncated / "results_test.jsonl.gz").write_bytes(data[: len(data) // 2])
    _one_line(_explore(look, user_cache, str(truncated)), "results_test.jsonl.gz", "not a readable results file")
    other_split = tmp_path / "other_split"
    _copy(source, other_split)
    with gzip.open(other_split / "results_test.jsonl.gz", "wt") as f:
        f.write(json.dumps({"id": "SynTrain-0", "triples": [["a", "b", "c"]]}) + "\n")
    _one_line(_explore(look, user_cache, str(other_split)), "no row names a question of split 'test'")
    other_data = tmp_path / "other_data"
    _copy(source, other_data)
    doc = json.loads((other_data / "metrics.json").read_text())
    doc["dataset"] = {"name": "okgqa", "fingerprint": "0000"}
    (other_data / "metrics.json").write_text(json.dumps(doc))
    _one_line(_explore(look, user_cache, str(source), str(other_data)), "do not name the same questions")
    killed = tmp_path / "killed"
    _copy(source, killed)
    (killed / "metrics.json").unlink()
    state = json.loads((killed / "run.json").read_text())
    (killed / "run.json").write_text(json.dumps({**state, "status": "running"}))
    _one_line(_explore(look, user_cache, str(killed)), "did not finish (status: killed)", "resume=auto")
    assert not list(tmp_path.glob("*/explore_test.html"))


def test_serve_serves_the_page(look, user_cache):
    run = look / "outputs" / "look" / "subgraphrag"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gsr_train.cli",
            "explore",
            str(run),
            "--out",
            str(look / "served.html"),
            "--serve",
            "--port",
            "0",
        ],
        cwd=look,
        env=_env(user_cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = ""
        while "serving" not in line:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        url = line.split()[1]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/served.html")
        with urllib.request.urlopen(url, timeout=30) as answer:
            assert 'id="summary"' in answer.read().decode()
        port = url.split(":")[2].split("/")[0]  # taken now: a second server there is one line, before any work
        taken = _explore(look, user_cache, str(run), "--out", str(look / "second.html"), "--serve", "--port", port)
        _one_line(taken, f"--port {port}: cannot serve there")
        assert not (look / "second.html").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
