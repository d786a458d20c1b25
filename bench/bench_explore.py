"""The explorer page at CWQ size: ``gsr-train explore`` on a run of ``--questions`` test questions.

The embedded generator writes a test split of that many questions (graphs up to 500 triples each); a
run folder beside it holds a results file ranking every question's triples at random (its top 100, as a
retriever with K=100 writes) with its metrics.json and per-question values. The bench then writes the
page (seconds and peak RSS of the writing process, the file's size) and opens it in headless Chromium:
the time to first paint (the question table drawn: ``performance.now()`` when the page's first render
ends, from navigation start), the tab's JavaScript heap, and the time to open one question (its chunk
unpacked and the graph drawn).

    .venv/bin/python bench/bench_explore.py [--questions 35000]

Needs ``chromium`` and ``chromedriver`` for the browser figures (Debian packages); without them only the
writing is measured. Writes the table and ``bench/results/bench_explore.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchutil import peak_rss_mb, save_figures
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

TOP = 100


def make_run(root: Path, questions: int) -> Path:
    """A dataset of ``questions`` test questions and a run folder scoring a random ranking of them."""
    import yaml

    from gsr_train.data.synthetic import write_synthetic
    from gsr_train.eval.intervals import QuestionValues
    from gsr_train.eval.tail import metrics_row, write_metrics
    from gsr_train.kg.index import get_index

    data = write_synthetic(
        root / "data",
        {"num_train": 20, "num_validation": 20, "num_test": questions, "num_people": 20000, "num_films": 4000},
    )
    cache, run = root / "cache", root / "run"
    (run / ".hydra").mkdir(parents=True, exist_ok=True)
    cfg = {
        "data": {"name": "bench", "dir": str(data), "splits": ["test"], "skip_invalid": False},
        "paths": {"cache_dir": str(cache)},
    }
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    index = get_index(str(data), splits=("test",), cache_dir=cache)
    graphs = index["test"]
    rng = np.random.default_rng(0)
    hrt = graphs.global_edges().numpy()
    owner = graphs.edge_question().numpy()
    order = np.lexsort((rng.random(owner.size), owner))
    rank = np.arange(owner.size) - np.repeat(graphs.edge_ptr.numpy()[:-1], graphs.num_edges.numpy())
    keep = order[rank < TOP]
    heads, rels, tails = (
        index.entities.take(hrt[keep, 0]),
        index.relations.take(hrt[keep, 1]),
        index.entities.take(hrt[keep, 2]),
    )
    bounds = np.searchsorted(owner[keep], np.arange(len(graphs) + 1))
    with gzip.open(run / "results_test.jsonl.gz", "wt") as f:
        for q in range(len(graphs)):
            a, b = bounds[q], bounds[q + 1]
            triples = [[h, r, t] for h, r, t in zip(heads[a:b], rels[a:b], tails[a:b])]
            f.write(
                json.dumps({"id": graphs.ids[q], "triples": triples, "scores": list(np.linspace(1, 0, b - a))}) + "\n"
            )
    hits = (rng.random(len(graphs)) < 0.7).astype(float)
    values = QuestionValues(list(graphs.ids)).add_mean("answer_recall@10", hits).add_mean("sp_recall@100", hits)
    row = metrics_row("random", "test", TOP, values.values(), None, "results_test.jsonl.gz", values)
    write_metrics(run, "bench_explore", "bench", "0", [row])
    return run


def in_browser(page: Path) -> dict:
    """First paint, heap and one question opened, in headless Chromium (empty without it)."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        return {}
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--enable-precise-memory-info",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    options.binary_location = chromium
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.get(page.as_uri())
        WebDriverWait(driver, 120).until(lambda d: d.execute_script("return document.body.dataset.painted"))
        paint = float(driver.execute_script("return document.body.dataset.painted")) / 1000
        heap = driver.execute_script("return performance.memory.usedJSHeapSize") / 1e6
        last = driver.execute_script("return document.querySelectorAll('tr.question')[99].dataset.id")
        start = time.perf_counter()
        driver.execute_script(f"location.hash = 'q={last}'")
        WebDriverWait(driver, 60).until(
            lambda d: d.execute_script("return document.body.dataset.ready") == "1" and d.find_elements("id", "graph")
        )
        opened = time.perf_counter() - start
        return {"first_paint_s": round(paint, 2), "heap_mb": round(heap, 1), "open_question_s": round(opened, 3)}
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=35000)
    parser.add_argument("--workdir", help="keep the generated data and run here (reused when it holds them)")
    args = parser.parse_args()
    from gsr_train.config import register_resolvers
    from gsr_train.explore.page import render, write_page

    register_resolvers()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.workdir or tmp)
        start = time.perf_counter()
        done = root / "run" / "metrics.json"
        run = done.parent if done.is_file() else make_run(root, args.questions)
        setup = time.perf_counter() - start
        start = time.perf_counter()
        page = render([run], "test", 50)
        written = write_page(page, run / "explore_test.html")
        seconds = time.perf_counter() - start
        figures = {
            "questions": page.questions,
            "results_mb": round((run / "results_test.jsonl.gz").stat().st_size / 1e6, 1),
            "write_s": round(seconds, 1),
            "write_peak_rss_mb": peak_rss_mb(),
            "page_mb": round(written.stat().st_size / 1e6, 1),
            "chunks": page.chunks,
            "setup_s": round(setup, 1),
            **in_browser(written),
        }
    table = Table(title=f"gsr-train explore: a run of {figures['questions']:,} test questions (top {TOP} triples each)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        table.add_row(key, str(value))
    Console().print(table)
    save_figures(ROOT / "bench" / "results" / "bench_explore.json", figures)


if __name__ == "__main__":
    main()
