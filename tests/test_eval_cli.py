"""``python eval.py``: every trained method (SubgraphRAG, GSR, readers) and the untrained
retrievers score a test-only folder whose graphs use entities and relations the training data
never saw, into a new run folder, from the run folder's saved config."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from gsr_train.data.errors import PreflightError
from gsr_train.eval.tail import in_run

from .conftest import compose_config, quiet
from .subgraphrag_toy import toy_rows, toy_run_overrides

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
RENAMED = {"music.artist.genre": "music.artist.style_unseen", "sports.team.sport": "sports.club.game_unseen"}


def unseen_test_folder(folder: Path, n: int = 10) -> Path:
    """A folder with only a test split: new entities (prefix X) and two relations never seen in training."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = toy_rows(n, 99, "X")
    for r in rows:
        r["graph"] = [[h, RENAMED.get(rel, rel), t] for h, rel, t in r["graph"]]
    with gzip.open(folder / "test.jsonl.gz", "wt") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return folder


def save_run_config(folder: Path, cfg, experiment: str) -> None:
    """What Hydra writes into a train.py run folder (.hydra/config.yaml + hydra.yaml choices)."""
    (folder / ".hydra").mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, folder / ".hydra" / "config.yaml")
    OmegaConf.save({"hydra": {"runtime": {"choices": {"experiment": experiment}}}}, folder / ".hydra" / "hydra.yaml")


def eval_cfg(tmp_path, out, *overrides):
    return compose_config(
        [
            f"paths.output_dir={out}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            *quiet(),
            *overrides,
        ],
        config_name="eval",
    )


def _env(tmp_path):
    return {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "GSR_TRAIN_CACHE": str(tmp_path / "cache")}


def test_eval_on_the_runs_own_data_opens_the_runs_index_and_gives_its_results(tmp_path):
    """``eval.py ckpt_path=RUN split=test`` on the data the run trained on opens the run's cached KG index (no
    rebuild, no re-embedding) and writes the run's own results, byte for byte; with another cache (the run's
    index not there) it reads the scored split alone, as on other data."""
    overrides = [
        o
        for o in toy_run_overrides(tmp_path, settings={"paths.output_dir": "IGNORED"})
        if not o.startswith(("paths.", "experiment_name"))
    ]

    def command(script: str, *args: str, cache: str = "cache") -> subprocess.CompletedProcess:
        env = {**_env(tmp_path), "GSR_TRAIN_CACHE": str(tmp_path / cache)}
        done = subprocess.run([sys.executable, str(ROOT / script), *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    command("train.py", *overrides, f"hydra.run.dir={tmp_path / 'run'}")
    own = command("eval.py", f"ckpt_path={tmp_path / 'run'}", "split=test", f"hydra.run.dir={tmp_path / 'own'}")
    assert "scoring test in the run's own KG index (splits train, validation, test, cached)" in own.stderr + own.stdout
    assert "embedded" not in own.stderr + own.stdout and "KG index built" not in own.stderr + own.stdout
    results = (tmp_path / "run" / "results_test.jsonl.gz").read_bytes()
    assert gzip.decompress((tmp_path / "own" / "results_test.jsonl.gz").read_bytes()) == gzip.decompress(results)
    other = command("eval.py", f"ckpt_path={tmp_path / 'run'}", "split=test", f"hydra.run.dir={tmp_path / 'other'}",
                    cache="other_cache")  # fmt: skip
    assert "own KG index" not in other.stderr + other.stdout and "KG index built" in other.stderr + other.stdout
    figures = json.loads((tmp_path / "other" / "metrics.json").read_text())
    assert (
        figures["split"] == "test"
        and figures["questions"] == json.loads((tmp_path / "own" / "metrics.json").read_text())["questions"]
    )


@pytest.mark.slow
def test_subgraphrag_run_scored_on_unseen_test_only_folder_via_the_command(tmp_path):
    overrides = [
        o
        for o in toy_run_overrides(tmp_path, settings={"paths.output_dir": "IGNORED"})
        if not o.startswith(("paths.", "experiment_name"))
    ]
    train = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *overrides, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    other = unseen_test_folder(tmp_path / "newkg")
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "eval.py"),
            f"ckpt_path={tmp_path / 'run'}",
            f"data.dir={other}",
            "split=test",
            "top_k=20",
        ],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = list((tmp_path / "outputs" / "eval").iterdir())
    assert len(runs) == 1
    out = runs[0]
    figures = json.loads((out / "metrics.json").read_text())
    trained = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert Path(figures["checkpoint"]) == in_run(tmp_path / "run", trained["checkpoint"])  # the run's best checkpoint
    assert figures["data"] == "newkg" and figures["split"] == "test" and figures["questions"] == 10
    assert figures["at_k"]["k"] == 20 and figures["training"] == {}
    rows = [json.loads(x) for x in gzip.open(out / "results_test.jsonl.gz", "rt").read().splitlines()]
    assert len(rows) == 10 and all(len(r["triples"]) == 20 for r in rows)
    assert any(t[1] in RENAMED.values() for r in rows for t in r["triples"])  # unseen relations are scored
    note = json.loads((out / "eval.json").read_text())
    assert note["source_run"] == str(tmp_path / "run") and note["method"] == "subgraphrag"
    assert json.loads((out / "run.json").read_text())["status"] == "finished"
    # a checkpoint file works as well; a missing one is one clear message, before any work
    ckpt = in_run(tmp_path / "run", trained["checkpoint"])  # relative to its run folder
    again = subprocess.run(
        [sys.executable, str(ROOT / "eval.py"), f"ckpt_path={tmp_path / 'nope.ckpt'}", f"data.dir={other}"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert again.returncode == 2 and "nope.ckpt does not exist" in again.stderr and "Traceback" not in again.stderr
    assert Path(ckpt).is_file()


def test_gsr_model_scored_on_unseen_relations_counts_them(tmp_path):
    from gsr_train.models.gsr.modeling import build_gsr_model
    from gsr_train.runs.evaluate_run import run

    train_dir = tmp_path / "train_data"
    from .subgraphrag_toy import write_toy

    write_toy(train_dir, sizes=(12, 4, 4))
    run_dir = tmp_path / "gsr_run"
    cfg = compose_config(
        [
            "+experiment=gsr_quickstart",
            f"data.dir={train_dir}",
            "data.name=toy",
            f"paths.output_dir={run_dir}",
            f"paths.cache_dir={tmp_path / 'cache'}",
        ]
    )
    relations = sorted({t[1] for row in toy_rows(12, 0, "T") for t in row["graph"]})
    gsr = build_gsr_model(OmegaConf.to_container(cfg.model, resolve=True), relations)
    gsr.save_pretrained(run_dir / "model")
    save_run_config(run_dir, cfg, "gsr_quickstart")
    other = unseen_test_folder(tmp_path / "newkg", n=6)
    out = tmp_path / "eval"
    run(eval_cfg(tmp_path, out, f"ckpt_path={run_dir}", f"data.dir={other}"), [f"data.dir={other}"])
    metrics = json.loads((out / "metrics.json").read_text())
    unknown = metrics["unknown_relations"]
    assert unknown["kg_relations_without_token"] == 2 and set(unknown["examples"]) == set(RENAMED.values())
    assert metrics["data"]["eval_questions"] == 6
    assert any(p.name.startswith("results_test") for p in out.iterdir())
    assert json.loads((out / "eval.json").read_text())["method"] == "gsr"


@pytest.mark.parametrize(
    "evidence, says",
    [
        ([], "cosine retriever"),
        (["qa.retrieval.sources=[{retriever: cosine, top_k: 1}, {retriever: ppr, share: 40}]"], "merged from cosine"),
    ],
    ids=["cosine", "merged sources"],
)
def test_reader_adapter_scored_on_another_folder(tmp_path, evidence, says):
    """A reader run (its evidence from the cosine retriever, or merged from two retrievers) scored by
    eval.py on a folder that holds only a test split: the same evidence, retrieved there."""
    from gsr_train.runs.evaluate_run import run
    from gsr_train.runs.reader import run as train_reader

    from .test_reader_helpers import tiny_llama_folder
    from .test_reader_run import _rows, _write

    data = tmp_path / "data"
    data.mkdir()
    _write(data, "train", _rows("tr", 6))
    model = tiny_llama_folder(tmp_path / "tiny")
    run_dir = tmp_path / "reader_run"
    common = [
        f"paths.cache_dir={tmp_path / 'cache'}",
        *quiet(),
        "reader=tiny_llama",
        f"reader.model={model}",
        "reader.precision=fp32",
        "qa.format=triples",
        "top_k=2",
        "qa.max_prompt_tokens=400",
        "qa.train.max_steps=2",
        "qa.train.batch_size=3",
        "qa.eval.batch_size=2",
        "qa.eval.max_new_tokens=4",
        "encoder.name=hashing",
        "+encoder.dim=32",
    ]
    cfg = compose_config(
        [
            "+experiment=reader_webqsp_mini",
            f"paths.output_dir={run_dir}",
            f"data.dir={data}",
            "data.splits=[train]",
            "qa.eval_split=train",
            *common,
            *evidence,
        ]
    )
    train_reader(cfg)  # no retrieval checkpoint: cosine evidence, and it says so
    assert says in json.loads((run_dir / "metrics.json").read_text())["retrieval"]["train"]["evidence"]
    save_run_config(run_dir, cfg, "reader_webqsp_mini")
    other = tmp_path / "other"
    other.mkdir()
    _write(other, "test", _rows("zz", 4))
    out = tmp_path / "eval"
    run(
        eval_cfg(tmp_path, out, f"ckpt_path={run_dir}", f"data.dir={other}", "top_k=1"),
        [f"data.dir={other}", "top_k=1"],
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["metrics"]) == {f"finetuned_{v}" for v in cfg.qa.eval.variants.finetuned}
    assert metrics["k"] == 1 and metrics["eval_split"] == "test"
    assert metrics["metrics"]["finetuned_retrieved"]["all"]["n"] == 4
    assert says in metrics["retrieval"]["test"]["evidence"]
    if evidence:  # every line the reader saw names its source, in the new folder too
        preds = [json.loads(x) for x in (out / "predictions_finetuned_retrieved.jsonl").read_text().splitlines()]
        assert all(set(p["evidence_sources"]) <= {"cosine", "ppr"} for p in preds)
        assert any(p["evidence_sources"] for p in preds)


def test_untrained_retriever_by_experiment_name(tmp_path):
    from gsr_train.runs.evaluate_run import run

    other = unseen_test_folder(tmp_path / "newkg", n=5)
    out = tmp_path / "eval"
    run(
        eval_cfg(
            tmp_path,
            out,
            "+experiment=cosine_baseline",
            f"data.dir={other}",
            "encoder.name=hashing",
            "+encoder.dim=32",
            "top_k=7",
        ),
        [],
    )
    figures = json.loads((out / "metrics.json").read_text())
    assert figures["data"] == "newkg" and figures["questions"] == 5 and figures["k"] == 7
    assert json.loads((out / "eval.json").read_text())["source_run"] is None


def test_mistakes_are_one_message(tmp_path):
    from gsr_train.runs.evaluate_run import run

    with pytest.raises(PreflightError, match="give ckpt_path="):
        run(eval_cfg(tmp_path, tmp_path / "e1"), [])
    with pytest.raises(PreflightError, match="no run folder around it"):
        (tmp_path / "loose.ckpt").write_bytes(b"x")
        run(eval_cfg(tmp_path, tmp_path / "e2", f"ckpt_path={tmp_path / 'loose.ckpt'}"), [])
    cosine_run = tmp_path / "cos"
    save_run_config(cosine_run, compose_config(["+experiment=cosine_baseline"]), "cosine_baseline")
    with pytest.raises(PreflightError, match=r"nothing trained .* \+experiment=cosine_baseline"):
        run(eval_cfg(tmp_path, tmp_path / "e3", f"ckpt_path={cosine_run}"), [])


@pytest.mark.parametrize(
    "override, message",
    [("top_k=abc", "top_k=abc: expected an integer"), ("runner=nosuch", "runner=nosuch: not a runner; built in: ")],
)
def test_an_option_mistake_is_refused_before_the_run_folder_is_written(tmp_path, override, message):
    from gsr_train.options.check import RecipeError
    from gsr_train.runs.evaluate_run import run

    out = tmp_path / "eval"
    cfg = eval_cfg(tmp_path, out, "+experiment=cosine_baseline", "encoder.name=hashing", "+encoder.dim=32", override)
    with pytest.raises(RecipeError, match=message):
        run(cfg, [])
    assert not (out / "eval.json").exists() and not (tmp_path / "cache").exists()  # no note, no data work


def test_the_checkpoints_folder_inside_a_run_stands_for_the_run(tmp_path):
    """``ckpt_path=<run>/checkpoints`` (a checkpoint folder inside a run, as the docs allow) resolves
    to the run and its best checkpoint, as ``ckpt_path=<run>`` does (it was a FileNotFoundError
    traceback: the folder itself was handed to torch.load)."""
    from gsr_train.options.eval_config import find_source

    run_dir = tmp_path / "sgr"
    save_run_config(run_dir, compose_config(["+experiment=subgraphrag_quickstart"]), "subgraphrag_quickstart")
    (run_dir / "checkpoints").mkdir()
    for name in ("last.ckpt", "best-03.ckpt", "best-07.ckpt"):
        torch.save({}, run_dir / "checkpoints" / name)  # a complete (empty) checkpoint file
    whole = find_source(run_dir)
    for given in (run_dir / "checkpoints", f"{run_dir}/checkpoints/"):
        source = find_source(given)
        assert (source.folder, source.method, source.checkpoint) == (whole.folder, whole.method, whole.checkpoint)
    assert source.checkpoint == str(run_dir / "checkpoints" / "best-07.ckpt")
    assert find_source(run_dir / "checkpoints" / "last.ckpt").checkpoint == str(run_dir / "checkpoints" / "last.ckpt")


def test_a_results_file_a_truncated_checkpoint_or_a_damaged_config_is_one_line(tmp_path):
    """``ckpt_path=`` a results file, a truncated checkpoint, a run whose .hydra/config.yaml is damaged:
    one line naming the file, before anything is loaded (they were tracebacks)."""
    from gsr_train.options.eval_config import find_source

    run_dir = tmp_path / "sgr"
    save_run_config(run_dir, compose_config(["+experiment=subgraphrag_quickstart"]), "subgraphrag_quickstart")
    (run_dir / "checkpoints").mkdir()
    good = run_dir / "checkpoints" / "best-01.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000)}}, good)
    (run_dir / "results_test.jsonl.gz").write_bytes(b"\x1f\x8b")
    with pytest.raises(PreflightError, match=r"results_test.jsonl.gz is no checkpoint \(.ckpt\)"):
        find_source(run_dir / "results_test.jsonl.gz")
    cut = run_dir / "checkpoints" / "best-02.ckpt"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(PreflightError, match="best-02.ckpt is damaged or truncated"):
        find_source(cut)
    assert find_source(good).checkpoint == str(good)
    (run_dir / ".hydra" / "config.yaml").write_text("runner: [unclosed\n  - x: {")
    with pytest.raises(PreflightError, match=r"config.yaml: not a readable run config \("):
        find_source(run_dir)
