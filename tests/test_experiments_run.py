"""Every experiment file runs end to end, through the same ``run_experiment`` train.py calls, on a
tiny data folder, and ends with the run marked finished and one ``metrics.json`` in the shared schema.

The overrides per experiment are only what size and this offline CPU machine need; each one that
changes more than a size says why. A new experiment file without an entry here fails the test.
"""
from __future__ import annotations

import gzip
import json
import socket
from pathlib import Path

import pytest

from .conftest import REPO, compose_config
from .subgraphrag_toy import write_toy
from .test_reader_helpers import tiny_llama_folder

EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml") if not p.stem.endswith("_defaults"))
TINY_T5 = "{d_model: 32, d_ff: 64, num_layers: 1, num_decoder_layers: 1, num_heads: 2, d_kv: 16, dropout_rate: 0.0}"
QUIET = ["logger=none", "~callbacks.rich_progress", "trainer.enable_progress_bar=false"]
HASHING = ["encoder.name=hashing", "+encoder.dim=32"]  # the offline stand-in for MiniLM / gte-large
SGR_SMALL = ["model.train.epochs=1", "model.train.graphs_per_batch=4"]
READER_SMALL = ["qa.k=3", "qa.max_prompt_tokens=200", "qa.train.max_steps=2", "qa.train.batch_size=2",
                "qa.train.max_length=200", "qa.eval.batch_size=4", "qa.eval.max_new_tokens=4", "qa.limit.train=4",
                "qa.limit.test=3", "qa.retrieval.k=5"]
ROBUST_SMALL = ["robustness.methods=[swap,delete]", "robustness.levels=[0.5]", "robustness.kge.epochs=1",
                "robustness.max_questions=6", "robustness.report_k=10", "eval_ks=[5,10]"]
GSR_SMALL = ["model.epochs=1", "gsr.decode.beams=2", "gsr.val_decode.beams=2", "gsr.max_eval_questions=4",
             "gsr.max_val_questions=4"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _paths_folder(root: Path, shared: Path) -> tuple[Path, Path]:
    """The first rows of the real webqsp_paths chains and the webqsp_mini graphs of its test rows."""
    chains, graphs = root / "paths", root / "paths_graphs"
    chains.mkdir()
    graphs.mkdir()
    keep = {"train": 40, "validation": 8, "test": 30}
    test_ids = set()
    for split, n in keep.items():
        with gzip.open(shared / "webqsp_paths" / f"{split}.jsonl.gz", "rt") as f:
            rows = [json.loads(line) for _, line in zip(range(n), f)]
        if split == "test":
            test_ids = {r["id"] for r in rows}
        with gzip.open(chains / f"{split}.jsonl.gz", "wt") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    with gzip.open(shared / "webqsp_mini" / "test.jsonl.gz", "rt") as f, \
            gzip.open(graphs / "test.jsonl.gz", "wt") as out:
        out.writelines(line for line in f if json.loads(line)["id"] in test_ids)
    return chains, graphs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("experiments")
    toy = write_toy(root / "toy", sizes=(16, 6, 6))
    chains, graphs = _paths_folder(root, shared_data)
    llm_chains = root / "llm_chains.jsonl"  # gsr_base's GPT-selected chains, for the toy questions
    with gzip.open(toy / "train.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    llm_chains.write_text("".join(json.dumps({"id": r["id"], "gpt_paths": [[r["graph"][0][1]]]}) + "\n"
                                  for r in rows))
    return {"root": root, "toy": toy, "chains": chains, "graphs": graphs, "llm_chains": llm_chains,
            "llama": tiny_llama_folder(root / "tiny_llama"), "cache": root / "cache"}


def overrides(name: str, t: dict) -> list[str]:
    toy = [f"data.dir={t['toy']}", "data.labels={}"]
    on_cpu = ["trainer=cpu"]  # the experiment asks for a GPU; this machine has none
    reader = [f"reader.model={t['llama']}", *READER_SMALL]  # a 2-layer random LLaMA instead of 7B / 8B / SmolLM2
    return {
        "subgraphrag_quickstart": [*toy, *HASHING, *SGR_SMALL],
        "subgraphrag_webqsp_mini": [*toy, *HASHING, *SGR_SMALL],
        "subgraphrag_webqsp": [*toy, *HASHING, *SGR_SMALL, *on_cpu],  # the hub dataset is not reachable here
        "subgraphrag_cwq": [*toy, *HASHING, *SGR_SMALL, *on_cpu],
        "cosine_baseline": [*toy, *HASHING],
        "classic_triplets": [*toy, *HASHING],
        "classic_paths": [*toy, *HASHING],
        "classic_pcst": [*toy, *HASHING],
        "simgrag": [*toy, *HASHING],
        "safe": [*toy, *HASHING, "safe.k_qg=2"],
        "robustness_quickstart": [*toy, *HASHING, *ROBUST_SMALL],
        "robustness_webqsp_mini": [*toy, *HASHING, *ROBUST_SMALL],
        "gsr_quickstart": [*toy, *GSR_SMALL],
        "gsr_webqsp_paths": [f"data.dir={t['chains']}", f"data.graphs={t['graphs']}", "data.graph_splits=[test]",
                             *GSR_SMALL, "model.batch_size=16"],
        "gsr_leave_relations_out": [f"data.dir={t['chains']}", f"data.graphs={t['graphs']}",
                                    "data.graph_splits=[test]", *GSR_SMALL, "model.batch_size=16"],
        # no pretrained T5 offline: gsr_base's recipe with a tiny random T5 of its family
        "gsr_base": [*toy, *GSR_SMALL, *on_cpu, "trainer.precision=32", "model.pretrained=null",
                     "+model.tokenizer=minilm", f"+model.config={TINY_T5}", f"gsr.llm_chains={t['llm_chains']}"],
        "reader_webqsp_mini": [*toy, *HASHING, *reader],
        "reader_llama2_7b": [*toy, *HASHING, *reader, *on_cpu],
        "reader_llama3_8b": [*toy, *HASHING, *reader, *on_cpu],
        # the run serves its own model at a free local port (llm.autostart), here the tiny LLaMA
        "reader_prompting": [*toy, *HASHING, *reader, f"llm.base_url=http://127.0.0.1:{_free_port()}/v1",
                             f"llm.autostart={t['llama']}", "llm.max_tokens=4", "qa.eval.max_new_tokens=4",
                             "qa.icl=false", "qa.k=1"],  # the tiny model's context is 512 tokens
    }[name]


def _in_range(metrics: dict) -> bool:
    """Every figure a fraction, except the readers' Score_h (a percentage, as in the paper)."""
    values = {m: v for m, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return bool(values) and all(0.0 <= v <= (100.0 if m == "score_h" else 1.0) for m, v in values.items())


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_runs_end_to_end_on_tiny_data(name, tiny, tmp_path):
    from gsr_train.eval.tail import read_metrics
    from gsr_train.runs.common import run_experiment

    out = tmp_path / "run"
    cfg = compose_config([f"+experiment={name}", f"paths.output_dir={out}", f"paths.cache_dir={tiny['cache']}",
                          f"experiment_name={name}", *QUIET, *overrides(name, tiny)])
    run_experiment(cfg)
    assert json.loads((out / "run.json").read_text())["status"] == "finished"
    doc = read_metrics(out / "metrics.json")
    assert doc["experiment"] == name and doc["rows"], doc
    for row in doc["rows"]:
        assert row["method"] and _in_range(row["metrics"]), row
        if row["results"]:
            assert Path(row["results"]).is_file(), row
