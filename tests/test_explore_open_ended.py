"""gsr-train explore on an open-ended run (OKGQA's evaluation against the scripted judge): each condition
is a view, OKGQA's own questions (ids outside the split) get rows of their own, and a question shows
its answer with each fact judged supported or not, in the data and in Chromium."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gsr_train.cli import main as cli
from gsr_train.llm.server import ScriptedBackend, serve_in_thread

from .browser import chromium, count, open_page
from .open_ended_helpers import judge
from .test_open_ended import _config


def _unpack(page: Path, element: str) -> dict:
    text = re.search(rf'id="{element}">([^<]*)<', page.read_text()).group(1)
    return json.loads(gzip.decompress(base64.b64decode(text)))


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> Path:
    from gsr_train.runs.experiment import run_experiment

    tmp = tmp_path_factory.mktemp("open_ended")
    with serve_in_thread(ScriptedBackend(judge), "scripted") as srv:
        cfg = _config(tmp, srv.base_url)
        run_experiment(cfg)
    run = tmp / "run"
    (run / ".hydra").mkdir()
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")  # what train.py's Hydra writes beside the run
    assert cli(["explore", str(run)]) == 0
    return run / "explore_test.html"


def test_each_condition_is_a_view_with_its_judged_facts(judged):
    doc = _unpack(judged, "summary")
    labels = [v["label"] for v in doc["views"] if v["kind"] == "open_ended"]
    assert len(labels) == 2 and all(label.startswith("A open_ended-") for label in labels), labels
    row = doc["ids"].index("o1")
    assert doc["questions"][row] == "What do you know about Richard Nixon?" and doc["hops"][row] == -1
    chunk = _unpack(judged, f"chunk-{row // doc['chunk']}")
    views = [i for i, v in enumerate(doc["views"]) if v["kind"] == "open_ended"]
    closed = next(i for i in views if "none" in doc["views"][i]["label"])
    facts = chunk["fields"][closed][str(row - chunk["q0"])]["facts"]
    assert [f["fact"] for f in facts] == [
        "Richard Nixon was born on the Moon.",
        "Richard Nixon won seven Olympic medals.",
    ]
    assert [f["llm_supported"] for f in facts] == [False, False]
    values = doc["views"][closed]["values"]
    assert values["supported_llm"][row] == 0.0  # the run keeps no per-question figures: the page counts its facts
    triplets = next(i for i in views if i != closed)
    assert doc["views"][triplets]["values"]["supported_llm"][row] == 1.0


def test_a_judged_answer_in_chromium(judged):
    driver = chromium()
    try:
        open_page(driver, judged, "#q=o1")
        assert count(driver) == len(_unpack(judged, "summary")["ids"])
        marks = driver.execute_script("return [...document.querySelectorAll('ul.facts li')].map(li => li.textContent)")
        assert any("✗" in m and "born on the Moon" in m for m in marks), marks
        assert any("✓" in m for m in marks), marks  # the triplets condition's facts are supported
    finally:
        driver.quit()
