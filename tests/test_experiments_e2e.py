"""Every experiment file runs end to end on tiny data, through the entry point the docs document.

``train.py +experiment=NAME ...`` composes ``conf/config.yaml`` with the experiment and hands it to
``gsr_train.runs.experiment.run_experiment``; each test does the same in-process (``compose_config`` is
train.py's composition) and checks that the run folder holds a finished run (``run.json``) and a
``metrics.json`` in the shared schema whose main figures are there and are fractions.

The list of experiments is the folder ``conf/experiment`` (minus ``*_defaults``): a new experiment
file without an entry in :func:`overrides` fails :func:`test_every_experiment_has_an_entry`.
An entry overrides only what size and this offline CPU machine need, so each experiment's own recipe
(runner, model family, encoder, data kind, labels, schedule, precision, adapters) is what runs:

* the data: the experiment's own kind, cut small. Generated (``data=synthetic``): the same generator
  with a tiny world (``SYNTHETIC``); the real fixtures (``webqsp_mini``, ``webqsp_paths``): a few of
  their rows (with webqsp_mini's GPT-4o labels) written into a temporary folder; the hub datasets
  (``webqsp``, ``cwq``, not reachable offline): the same webqsp_mini cut, which has their row format;
* sizes: one epoch, fewer beams, steps, questions, perturbation levels, shorter prompts;
* what cannot run here, each with its reason next to it: ``trainer=cpu`` for ``trainer=gpu`` (no GPU),
  the ``hashing`` encoder for gte-large (a hub model), a random 2-layer LLaMA / T5 of the same family
  for the 7B / 8B / T5-base hub models and for SmolLM2 (size).

One tiny data folder and one cache folder serve the whole session (per xdist worker).
"""

from __future__ import annotations

import gzip
import json
import socket
from pathlib import Path

import pytest

from gsr_train.eval.tail import in_run
from gsr_train.options.recipes import runner_name

from .conftest import REPO, compose_config, quiet
from .test_reader_helpers import tiny_llama_folder

pytestmark = pytest.mark.integration

EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml") if not p.stem.endswith("_defaults"))
# more than ~4 s each on 2 shared cores (CI runs them too: `pytest -n 2` selects every test)
SLOW = {
    "gsr_base",
    "gsr_paper_webqsp",
    "gsr_webqsp_paths",
    "gsr_leave_relations_out",
    "reader_llama2_7b",
    "reader_llama3_8b",
    "reader_prompting",
    "subgraphrag_webqsp",
    "subgraphrag_cwq",
}

QUIET = quiet()
# data=synthetic with a tiny generated world: 28 questions, ~300 entities (the quickstart: 1,250 / ~1,300)
SYNTHETIC = [
    f"+data.synthetic.{k}={v}"
    for k, v in dict(
        num_people=40,
        num_films=10,
        num_cities=8,
        num_regions=6,
        num_countries=4,
        num_organisations=6,
        num_universities=4,
        num_train=16,
        num_validation=6,
        num_test=6,
        max_triples=120,
        max_topic_degree=60,
    ).items()
]
# gte-large-en-v1.5 is a hub model (offline here): the offline hashing encoder takes its place
NO_GTE = ["encoder.name=hashing", "+encoder.dim=32"]
ON_CPU = ["trainer=cpu"]  # the experiment asks for a GPU; this machine has none
SGR_SMALL = ["model.train.epochs=1"]
GSR_SMALL = [
    "model.epochs=1",
    "gsr.decode.beams=2",
    "gsr.val_decode.beams=2",
    "gsr.max_eval_questions=4",
    "gsr.max_val_questions=4",
]
READER_SMALL = [
    "top_k=3",
    "qa.max_prompt_tokens=200",
    "qa.train.max_steps=2",
    "qa.train.batch_size=2",
    "qa.train.max_length=200",
    "qa.eval.batch_size=4",
    "qa.eval.max_new_tokens=4",
    "qa.limit.train=4",
    "qa.limit.test=3",
    "qa.retrieval.k=5",
]
ROBUST_SMALL = ["robustness.levels=[0.5]", "robustness.kge.epochs=1", "robustness.max_questions=4"]
# webqsp_mini rows per split in the cut: questions whose graph has 30-150 triples, an answer entity
# in the graph and GPT-4o labels (so recall and the labelled-triple figures are defined)
MINI_ROWS = {"train": 12, "validation": 4, "test": 6}
PATHS_ROWS = {"train": 40, "validation": 8, "test": 30}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _write(path: Path, rows) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def mini_cut(folder: Path, shared: Path) -> Path:
    """A few rows of each webqsp_mini split and their GPT-4o labels (``gpt_triples_{split}``)."""
    folder.mkdir()
    for split, n in MINI_ROWS.items():
        labels = {r["id"]: r for r in _read(shared / "webqsp_mini" / f"gpt_triples_{split}.jsonl.gz")}
        rows = [
            r
            for r in _read(shared / "webqsp_mini" / f"{split}.jsonl.gz")
            if 30 <= len(r["graph"]) <= 150 and r["a_entity"] and labels.get(r["id"], {}).get("triples")
        ][:n]
        _write(folder / f"{split}.jsonl.gz", rows)
        _write(folder / f"gpt_triples_{split}.jsonl.gz", [labels[r["id"]] for r in rows])
    return folder


def paths_cut(root: Path, shared: Path) -> tuple[Path, Path]:
    """The first rows of the real webqsp_paths chains and the webqsp_mini graphs of its test rows."""
    chains, graphs = root / "paths", root / "paths_graphs"
    chains.mkdir()
    graphs.mkdir()
    test_ids = set()
    for split, n in PATHS_ROWS.items():
        with gzip.open(shared / "webqsp_paths" / f"{split}.jsonl.gz", "rt") as f:
            rows = [json.loads(line) for _, line in zip(range(n), f)]
        if split == "test":
            test_ids = {r["id"] for r in rows}
        _write(chains / f"{split}.jsonl.gz", rows)
    _write(
        graphs / "test.jsonl.gz", [r for r in _read(shared / "webqsp_mini" / "test.jsonl.gz") if r["id"] in test_ids]
    )
    return chains, graphs


def gpt_chains(data: Path, out: Path) -> Path:
    """gsr_base's GPT-selected chains (``gpt_paths`` per id) for the cut's train questions: the relation
    of a GPT-4o-labelled triple leaving the topic entity (the hub's WebQTrn chains have other ids)."""
    labels = {r["id"]: r["triples"] for r in _read(data / "gpt_triples_train.jsonl.gz")}
    lines = []
    for row in _read(data / "train.jsonl.gz"):
        rels = [r for h, r, _ in labels[row["id"]] if h in row["q_entity"]] or [labels[row["id"]][0][1]]
        lines.append(json.dumps({"id": row["id"], "gpt_paths": [[rels[0]]]}) + "\n")
    out.write_text("".join(lines))
    return out


@pytest.fixture(scope="session")
def tiny(tmp_path_factory, shared_data):
    from gsr_train.llm.server import ScriptedBackend, serve_in_thread

    from .open_ended_helpers import judge

    root = tmp_path_factory.mktemp("experiments")
    mini = mini_cut(root / "webqsp_mini", shared_data)
    chains, graphs = paths_cut(root, shared_data)
    # the open-ended experiments' judge: a scripted OpenAI-compatible server (a 135M judge is slow)
    with serve_in_thread(ScriptedBackend(judge), "scripted") as judge_server:
        yield {
            "root": root,
            "mini": mini,
            "chains": chains,
            "graphs": graphs,
            "llm_chains": gpt_chains(mini, root / "gpt_chains.jsonl"),
            "llama": tiny_llama_folder(root / "tiny_llama", context=2048),
            "cache": root / "cache",
            "judge": judge_server.base_url,
        }


OPEN_SMALL = [
    "open_ended.skip_unknown=true",
    "open_ended.max_questions=2",
    "open_ended.geval.samples=1",
    "open_ended.calibration.max_facts=6",
]


def overrides(t: dict) -> dict[str, list[str]]:
    """Per experiment: the overrides that make it tiny and runnable offline on CPU (nothing else)."""
    mini = [f"data.dir={t['mini']}"]  # a cut of webqsp_mini (with its labels)
    hub = [f"data.dir={t['mini']}"]  # the RoG hub dataset is not reachable offline: the webqsp_mini cut (same format)
    paths = [f"data.dir={t['chains']}", f"data.graphs={t['graphs']}", "data.graph_splits=[test]"]
    # a 2-layer random LLaMA instead of LLaMA-2-7B / LLaMA-3-8B (hub) / SmolLM2-135M (size); the
    # reader's precision (4-bit QLoRA / bf16), adapter and LoRA settings stay the experiment's
    reader = [f"reader.model={t['llama']}", *READER_SMALL]
    judge = [f"llm.base_url={t.get('judge')}", "llm.model=scripted", "llm.autostart=null"]
    return {
        "subgraphrag_quickstart": [*SYNTHETIC, *SGR_SMALL],
        "subgraphrag_webqsp_mini": [*mini, *SGR_SMALL],
        "subgraphrag_webqsp": [*hub, *NO_GTE, *ON_CPU, *SGR_SMALL],
        "subgraphrag_cwq": [*hub, *NO_GTE, *ON_CPU, *SGR_SMALL],
        "cosine_baseline": [*SYNTHETIC],
        "retrieve": [*SYNTHETIC],
        "gnnrag_webqsp_mini": [*mini, "retriever.train.epochs=1", "retriever.options.hidden=16"],
        "classic_triplets": [*SYNTHETIC],
        "classic_paths": [*SYNTHETIC],
        "classic_pcst": [*SYNTHETIC],
        "simgrag": [*SYNTHETIC],
        "safe": [*SYNTHETIC],
        "robustness_quickstart": [*SYNTHETIC, *ROBUST_SMALL],
        "robustness_webqsp_mini": [*mini, *ROBUST_SMALL],
        "gsr_quickstart": [*SYNTHETIC, *GSR_SMALL],
        "gsr_webqsp_paths": [*paths, *GSR_SMALL],
        "gsr_leave_relations_out": [*paths, *GSR_SMALL],
        # the paper's GPU recipe on the chains cut: a tiny random T5 for t5-base, on the CPU (its CUDA gate off)
        "gsr_paper_webqsp": [
            *paths,
            *ON_CPU,
            *GSR_SMALL,
            "gsr.require_gpu=false",
            "model.pretrained=null",
            "+model.tokenizer=minilm",
            "+model.config={d_model: 32, d_ff: 64, num_layers: 1, num_decoder_layers: 1, num_heads: 2, "
            "d_kv: 16, dropout_rate: 0.0}",
        ],
        # google-t5/t5-base is a hub model: a tiny random T5 (MiniLM's offline WordPiece tokenizer) in its
        # place, the rest of gsr_base's recipe unchanged; its GPT chains file lives beside the hub data
        "gsr_base": [
            *hub,
            *ON_CPU,
            *GSR_SMALL,
            "model.pretrained=null",
            "+model.tokenizer=minilm",
            "+model.config={d_model: 32, d_ff: 64, num_layers: 1, num_decoder_layers: 1, num_heads: 2, "
            "d_kv: 16, dropout_rate: 0.0}",
            f"gsr.llm_chains={t['llm_chains']}",
        ],
        "reader_webqsp_mini": [*mini, *reader],
        "reader_quickstart": [*SYNTHETIC, *reader],
        # the scripted judge (its URL, no autostart); the embedded questions about the cut's graphs
        "okgqa_open_ended": [*mini, *judge, *OPEN_SMALL],
        "okgqa_calibration": [*mini, *judge, *OPEN_SMALL],
        "okgqa_perturbed": [
            *mini,
            *judge,
            *OPEN_SMALL,
            "open_ended.perturb.levels=[1.0]",
            "open_ended.perturb.kge.epochs=1",
        ],
        "reader_llama2_7b": [*hub, *NO_GTE, *ON_CPU, *reader],
        "reader_llama3_8b": [*hub, *NO_GTE, *ON_CPU, *reader],
        # llm.autostart serves a model from the run itself when nothing listens at llm.base_url: here
        # the tiny LLaMA (named as such in the rows) at a free port, instead of SmolLM2 at :8000 (size)
        "reader_prompting": [
            *mini,
            f"llm.autostart={t['llama']}",
            "llm.model=tiny_llama",
            f"llm.base_url=http://127.0.0.1:{_free_port()}/v1",
            "top_k=3",
            "qa.limit.test=3",
            "qa.retrieval.k=5",
            "qa.eval.max_new_tokens=4",
        ],
    }


def test_every_experiment_has_an_entry(tmp_path):
    entries = overrides({k: tmp_path for k in ("mini", "chains", "graphs", "llm_chains", "llama")})
    assert sorted(entries) == EXPERIMENTS, "conf/experiment and overrides() differ: give every experiment an entry"


# The main figures of every row, by runner: retrieval recall, GSR chain match and answer coverage,
# the readers' QA scores; all fractions except the readers' Score_h (a percentage, as in the paper)
MAIN = {
    "subgraphrag": {"sp_recall", "answer_recall"},
    "cosine": {"sp_recall", "answer_recall"},
    "retrieve": {"sp_recall", "answer_recall"},
    "classic": {"sp_recall", "answer_recall"},
    "simgrag": {"sp_recall", "answer_recall"},
    "safe": {"sp_recall", "answer_recall"},
    "robustness": {"sp_recall", "answer_recall"},
    "gsr": {"match@1", "match@3", "cov_recall"},
    "reader": {"hit", "hit@1", "macro_f1", "score_h"},
    "open_ended": {"factscore_llm", "hallucination_llm", "geval_correctness"},
    "open_ended_perturbed": {"factscore_llm", "hallucination_llm", "geval_correctness"},
    "judge_calibration": {"auc", "accuracy"},
}
RATINGS = {"geval_context_relevance", "geval_comprehensiveness", "geval_correctness", "geval_empowerment"}  # 1-5
PERCENT = {"score_h"}


def _rows_expected(cfg) -> tuple[str, set]:
    """The column that tells a run's rows apart and its values, from the composed config."""
    family = runner_name(cfg.runner)
    if family == "gsr":
        return "mode", set(cfg.gsr.eval_modes)
    if family == "robustness":
        return "perturbation", {"none", *cfg.robustness.methods}
    if family == "judge_calibration":
        return "verifier", {"encoder", "llm"}
    if family == "open_ended":
        return "condition", set(cfg.open_ended.forms)
    if family == "open_ended_perturbed":
        forms = [f for f in cfg.open_ended.forms if f != "none"]
        grid = {
            f"{f}@{m}:{lv:g}"
            for f in forms
            for m in cfg.open_ended.perturb.methods
            for lv in cfg.open_ended.perturb.levels
        }
        return "condition", set(cfg.open_ended.forms) | grid
    if family == "reader":
        variants = cfg.qa.eval.variants
        alone = {"retrieval_answers"}  # the evidence answering alone, next to every reader
        if cfg.qa.reading.method == "prompted":
            return "variant", {f"prompting_{e}" for e in variants.base} | alone
        return "variant", {f"base_{e}" for e in variants.base} | {f"finetuned_{e}" for e in variants.finetuned} | alone
    return "split", {cfg.get("split") or cfg.subgraphrag.eval_split}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in EXPERIMENTS])
def test_experiment_runs_end_to_end_on_tiny_data(name, tiny, tmp_path):
    from gsr_train.eval.tail import read_metrics
    from gsr_train.runs.experiment import run_experiment

    out = tmp_path / "run"
    cfg = compose_config(
        [
            f"+experiment={name}",
            f"paths.output_dir={out}",
            f"paths.cache_dir={tiny['cache']}",
            f"experiment_name={name}",
            *QUIET,
            *overrides(tiny)[name],
        ]
    )
    run_experiment(cfg)  # what train.py runs (inside report_user_errors)

    assert json.loads((out / "run.json").read_text())["status"] == "finished"
    doc = read_metrics(out / "metrics.json")
    assert doc["experiment"] == name and doc["rows"], doc
    assert doc["hardware"]["device"] == "cpu" and doc["hardware"]["float32_matmul_precision"] == "highest"
    column, values = _rows_expected(cfg)
    assert {row[column] for row in doc["rows"]} == values, doc["rows"]
    main = MAIN[runner_name(cfg.runner)] | ({"labelled_recall"} if doc.get("labels") else set())
    for row in doc["rows"]:
        figures = {m: v for m, v in row["metrics"].items() if v is not None}
        assert row["method"] and main <= set(figures), (main, row)
        for m, v in figures.items():
            low, high = (1.0, 5.0) if m in RATINGS else (0.0, 100.0 if m in PERCENT else 1.0)
            assert isinstance(v, (int, float)) and low <= v <= high, (m, row)
        if row["results"]:
            assert in_run(out, row["results"]).is_file(), row  # relative to the run folder


# One experiment of each family with trainer=gpu (the GPU lane, tests/test_gpu.py): training, serving,
# decoding, reading (4-bit QLoRA) and the metrics on CUDA, the run's hardware record saying so
# (and DDP with one process on the one GPU: the multi-GPU path as far as one device allows)
GPU_FAMILIES = {
    "subgraphrag_quickstart": ("subgraphrag_quickstart", []),
    "subgraphrag_quickstart_ddp": ("subgraphrag_quickstart", ["++trainer.strategy=ddp", "trainer.devices=1"]),
    "gnnrag_webqsp_mini": ("gnnrag_webqsp_mini", []),
    "retrieve": ("retrieve", []),
    "cosine_baseline": ("cosine_baseline", []),
    "gsr_quickstart": ("gsr_quickstart", []),
    "reader_webqsp_mini_4bit": ("reader_webqsp_mini", ["reader.precision=4bit"]),
    "robustness_quickstart": ("robustness_quickstart", []),
    "simgrag": ("simgrag", []),
    "classic_pcst": ("classic_pcst", []),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(GPU_FAMILIES))
def test_experiment_family_runs_on_the_gpu(case, tiny, tmp_path):
    from gsr_train.eval.tail import read_metrics
    from gsr_train.runs.experiment import run_experiment

    from .conftest import GPU_LANE

    name, extra = GPU_FAMILIES[case]
    out = tmp_path / "run"
    trainer = "trainer=gpu" if GPU_LANE == "cuda" else "trainer=cpu"  # GSR_GPU_LANE=cpu: a dry run
    cfg = compose_config(
        [
            f"+experiment={name}",
            f"paths.output_dir={out}",
            f"paths.cache_dir={tiny['cache']}",
            f"experiment_name={name}",
            *QUIET,
            *overrides(tiny)[name],
            trainer,
            *extra,
        ]
    )
    run_experiment(cfg)
    doc = read_metrics(out / "metrics.json")
    assert json.loads((out / "run.json").read_text())["status"] == "finished"
    hardware = doc["hardware"]
    assert hardware["device"].split(":")[0] == GPU_LANE, hardware
    assert hardware["float32_matmul_precision"] == ("high" if GPU_LANE == "cuda" else "highest")
    main = MAIN[runner_name(cfg.runner)]
    for row in doc["rows"]:
        figures = {m: v for m, v in row["metrics"].items() if v is not None}
        assert main <= set(figures), (main, row)
        for m, v in figures.items():
            assert 0.0 <= v <= (100.0 if m in PERCENT else 1.0), (m, row)


# ------------------------------------------------------------------ sweeps as users type them
def _train_cli(cwd: Path, cache: Path, *args: str):
    """``python train.py ARGS`` in ``cwd``: folders land where a user's would (outputs/, multirun/)."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "GSR_TRAIN_CACHE": str(cache),
    }
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def _one_sweep(cwd: Path, experiment: str) -> Path:
    sweeps = list((cwd / "multirun" / experiment).iterdir())
    assert len(sweeps) == 1, sweeps
    return sweeps[0]


@pytest.mark.parametrize(
    "experiment,swept,values",
    [
        ("cosine_baseline", "top_k", ("5", "20")),  # a sweep over K
        ("subgraphrag_quickstart", "model.hidden", ("16", "32")),  # a sweep over model size
    ],
)
@pytest.mark.slow
def test_plain_multirun_sweeps_every_point_into_its_own_guarded_folder(tiny, tmp_path, experiment, swept, values):
    import csv

    extra = {"cosine_baseline": [], "subgraphrag_quickstart": ["subgraphrag.compare_cosine=false", *SGR_SMALL]}
    args = ["-m", f"+experiment={experiment}", f"{swept}={','.join(values)}", *SYNTHETIC, *QUIET, *extra[experiment]]
    proc = _train_cli(tmp_path, tiny["cache"], *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Callback RunFolderGuard" not in proc.stderr and "InterpolationResolutionError" not in proc.stderr
    sweep = _one_sweep(tmp_path, experiment)  # multirun/<experiment>/<time>/: named without any option
    rows = list(csv.DictReader((sweep / "aggregate.csv").open()))
    assert sorted(r[swept] for r in rows) == sorted(values)
    for job in ("0", "1"):
        assert json.loads((sweep / job / "run.json").read_text())["status"] == "finished"
    table = (sweep / "aggregate.md").read_text().split("\n", 1)[1]  # below its heading (the folder)

    # the same sweep pointed at the finished sweep folder: refused before any job runs
    again = _train_cli(tmp_path, tiny["cache"], *args, f"hydra.sweep.dir={sweep}")
    assert again.returncode == 2, again.stderr[-3000:]
    assert f"{sweep} holds an earlier sweep" in again.stderr and "Traceback" not in again.stderr
    assert (sweep / "aggregate.md").read_text().split("\n", 1)[1] == table
    # continuing it: every job is already finished, nothing is trained again, the table stays
    resumed = _train_cli(tmp_path, tiny["cache"], *args, f"hydra.sweep.dir={sweep}", "resume=auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.count("holds a finished run: nothing to resume") == 2
    assert (sweep / "aggregate.md").read_text().split("\n", 1)[1] == table
