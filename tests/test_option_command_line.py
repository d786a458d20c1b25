"""Every config mistake on the real command line is one line on stderr and exit status 2, before
any work: those Hydra refuses while composing (a key the config lacks typed without ``+``, a group
option that does not exist) as well as those the option dataclasses refuse. And every option is
described: ``gsr-train options NAME`` and ``python train.py +experiment=NAME --help`` print them.
None of these imports torch, Lightning or transformers (their speed: bench/bench_startup.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from .conftest import REPO
from .refused_commands import HEAVY, IMPORT_TIME  # what a refusal, --help or gsr-train options must not import


def _train(
    tmp_path, *args: str, script: str = "train.py", env: dict | None = None, flags: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *flags, str(REPO / script), *args],
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "GSR_TRAIN_CACHE": str(tmp_path / "cache"), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _imported(proc: subprocess.CompletedProcess) -> set[str]:
    """The top-level packages a process run with ``python -X importtime`` imported."""
    lines = [line for line in proc.stderr.splitlines() if line.startswith(IMPORT_TIME)]
    assert lines, "run it with -X importtime"
    return {line.rsplit("|", 1)[1].strip().split(".", 1)[0] for line in lines}


def _messages(proc: subprocess.CompletedProcess) -> str:
    """stderr without python -X importtime's lines."""
    return "\n".join(line for line in proc.stderr.splitlines() if not line.startswith(IMPORT_TIME))


def _cli(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """``gsr-train ARGS`` under python -X importtime, in a fresh folder."""
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gsr_train.cli", *args],
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "GSR_TRAIN_CACHE": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=300,
    )


MISTAKES = [
    (
        "subgraphrag_quickstart",
        "model.hiden=64",
        "error: model.hiden: not a SubgraphRAGModel option (conf/model/subgraphrag.yaml); did you mean model.hidden?",
    ),
    (
        "subgraphrag_quickstart",
        "+model.hiden=64",
        "error: model.hiden: not a SubgraphRAGModel option (conf/model/subgraphrag.yaml); did you mean model.hidden?",
    ),
    (
        "subgraphrag_quickstart",
        "subgraphrag.top_k=10",
        "error: subgraphrag.top_k: renamed to top_k (one name for how many a run keeps, in every method and in "
        "eval.py)",
    ),
    (
        "gsr_quickstart",
        "gsr.decode.top_n=5",
        "error: gsr.decode.top_n: renamed to top_k (one name for how many a run keeps, in every method and in eval.py)",
    ),
    (
        "gsr_quickstart",
        "gsr.decod=3",
        "error: gsr.decod: not a GSRRun option (conf/recipes/gsr_defaults.yaml); did you mean gsr.decode?",
    ),
    (
        "subgraphrag_quickstart",
        "model.train.lr=abc",
        "error: model.train.lr: not a SubgraphRAGTrain option (conf/model/subgraphrag.yaml); "
        "did you mean model.train.optim.lr?",
    ),
    (
        "subgraphrag_quickstart",
        "eval_ks=[]",
        "error: eval_ks=[]: expected a non-empty list of integers (conf/config.yaml)",
    ),
    (
        "subgraphrag_quickstart",
        "model=gsr_tiny",
        "error: model=gsr_tiny is a t5 model; the subgraphrag runner needs a subgraphrag model: model=subgraphrag | "
        "subgraphrag_mlp | subgraphrag_mlp_topic | subgraphrag_paper | subgraphrag_wide (conf/model/)",
    ),
    (
        "subgraphrag_quickstart",
        "data=nosuch",
        "error: data=nosuch: no such option in conf/data/ (choices: cwq, synthetic, webqsp, webqsp_mini, webqsp_paths)",
    ),
    (
        "subgraphrag_quickstart",
        "encoder=nosuch",
        "error: encoder=nosuch: no such option in conf/encoder/ (choices: gte_large, minilm)",
    ),
    (
        "subgraphrag_quickstart",
        "data.dri=/x",
        "error: data.dri: not a key of data (conf/data/synthetic.yaml); did you mean data.dir? "
        "(a new key: +data.dri=...)",
    ),
    (
        "subgraphrag_quickstart",
        "model=gsr_tinyy",
        "error: model=gsr_tinyy: no such option in conf/model/; did you mean model=gsr_tiny? "
        "(choices: gsr_3b, gsr_base,",
    ),
    (
        "subgraphrag_quickstart",
        "runner=nosuch",
        "error: runner=nosuch: not a runner; built in: subgraphrag, gsr, reader,",
    ),
    (
        "subgraphrag_quickstart",
        "eval_ks=[10,",
        "error: eval_ks=[10,: Hydra cannot parse this override: no viable alternative at input '[10,'",
    ),
]


@pytest.mark.parametrize("experiment, override, message", MISTAKES, ids=[m[1] for m in MISTAKES])
def test_a_config_mistake_on_the_command_line_is_one_line_and_exit_2(tmp_path, experiment, override, message):
    proc = _train(tmp_path, f"+experiment={experiment}", override, flags=("-X", "importtime"))
    stderr = _messages(proc).strip()
    assert proc.returncode == 2, stderr[-3000:]
    assert stderr.splitlines() == [stderr], stderr  # one line, no traceback
    assert stderr.startswith(message), stderr
    assert not (tmp_path / "cache").exists() and not (tmp_path / "outputs").exists()  # no work, no run folder
    assert not _imported(proc) & set(HEAVY), "a refusal imports none of " + ", ".join(HEAVY)


def test_eval_py_and_gsr_train_robustness_report_hydras_refusals_the_same_way(tmp_path):
    proc = _train(tmp_path, "ckpt_path=x", "data=nosuch", script="eval.py")
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: data=nosuch: no such option in conf/data/")
    proc = subprocess.run(
        [sys.executable, "-m", "gsr_train.cli", "robustness", "+experiment=robustness_quickstart", "encoder=nosuch"],
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "GSR_TRAIN_CACHE": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == "error: encoder=nosuch: no such option in conf/encoder/ (choices: gte_large, minilm)"


def test_a_bug_in_the_job_keeps_hydras_usual_report(tmp_path):
    """Hydra raises composition errors to run_hydra only while composing: the job's own errors are
    Hydra's short traceback and exit 1, as before."""
    (tmp_path / "buggy_runner.py").write_text("def run(cfg):\n    raise RuntimeError('a bug')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = _train(tmp_path, "+experiment=cosine_baseline", "runner=buggy_runner.run", env=env)
    assert proc.returncode == 1 and "RuntimeError: a bug" in proc.stderr
    assert "Set the environment variable HYDRA_FULL_ERROR=1" in proc.stderr


def test_train_py_help_prints_the_experiments_options(tmp_path):
    proc = _train(tmp_path, "+experiment=gsr_quickstart", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "== Options of +experiment=gsr_quickstart ==" in proc.stdout
    assert "gsr.decode.beams = 10" in proc.stdout and "beams of the beam search" in proc.stdout
    assert "model.optim.lr = 0.003  (default 0.0005)" in proc.stdout  # gsr_tiny's own rate
    proc = _train(tmp_path, "--help")
    assert proc.returncode == 0 and "subgraphrag_quickstart" in proc.stdout.split("experiments (conf/experiment", 1)[1]


def test_eval_py_help_leads_with_ckpt_path():
    """``python eval.py --help`` says first what eval.py takes: the run to score (it never named ckpt_path)."""
    import subprocess
    import sys

    from .conftest import REPO

    done = subprocess.run([sys.executable, "eval.py", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    first = done.stdout.splitlines()[0]
    assert first.startswith("usage: python eval.py ckpt_path=RUN_FOLDER_OR_CHECKPOINT") and "data.dir=FOLDER" in first


def test_help_and_gsr_train_options_import_no_torch(tmp_path):
    """The options of an experiment are printed from the option dataclasses alone, without torch."""
    helped = _train(tmp_path, "+experiment=subgraphrag_quickstart", "--help", flags=("-X", "importtime"))
    listed = _cli(tmp_path, "options", "subgraphrag_quickstart")
    for proc in (helped, listed):
        assert proc.returncode == 0, _messages(proc)[-3000:]
        assert "model.hidden = " in proc.stdout
        assert not _imported(proc) & set(HEAVY), proc.args


NO_DATA = "does not exist (give a folder of splits, or a hub dataset name)"
INPUT_MISTAKES = [
    (("compare", "nowhere", "nowhere_b"), "error: gsr-train compare: nowhere: no such run folder"),
    (("aggregate", "nowhere"), "error: gsr-train aggregate: nowhere: no such folder"),
    (
        ("explore", "nowhere"),
        "error: gsr-train explore: Invalid value for 'RUN [RUN_B ...]': nowhere: no such run folder",
    ),
    (("export", "nowhere", "out"), "error: gsr-train export: Invalid value for 'SOURCE': nowhere does not exist"),
    (("publish", "nowhere", "--repo_id", "me/x", "--dry_run"), "error: gsr-train publish: Invalid value for 'FOLDER'"),
    (("ask", "nowhere", "who?", "--kg", "kg"), "error: gsr-train ask: Invalid value for 'run': nowhere does not exist"),
    (
        ("recall", "--data", "./nowhere", "--results", "r.jsonl"),
        f"error: gsr-train recall: Invalid value for '--data': ./nowhere {NO_DATA}",
    ),
    (("cosine", "--data", "./nowhere"), f"error: gsr-train cosine: Invalid value for '--data': ./nowhere {NO_DATA}"),
    (("embed", "--data", "/nowhere"), f"error: gsr-train embed: Invalid value for '--data': /nowhere {NO_DATA}"),
    (
        ("build-index", "--data", "~/nowhere"),
        f"error: gsr-train build-index: Invalid value for '--data': ~/nowhere {NO_DATA}",
    ),
    (("supervision", "--data", "./nowhere"), "error: gsr-train supervision: Invalid value for '--data': ./nowhere"),
    (("compare-patterns", "--data", "./x.jsonl"), "error: gsr-train compare-patterns: Invalid value for '--data': ./x"),
    (
        ("link", "--data", "./nowhere", "--kg", "kg"),
        f"error: gsr-train link: Invalid value for '--data': ./nowhere {NO_DATA}",
    ),
    (
        ("explore", "."),
        "error: gsr-train explore: Invalid value for 'RUN [RUN_B ...]': .: no metrics.json (not a run folder",
    ),
    (("gsr-table", "."), "error: gsr-train gsr-table: .: no GSR run results under it"),
    (("publish", ".", "--repo_id", "me/x", "--dry_run"), "error: gsr-train publish: .: no README.md model card"),
    (("publish", ".", "--repo_id", "x", "--dry_run"), "error: gsr-train publish: --repo_id must be ORG/NAME"),
    (("export", ".", "out", "--kind", "gnn"), "error: gsr-train export: Invalid value for --kind: 'gnn': one of"),
    (
        ("recall", "--results", "r.jsonl", "--data", "."),
        "error: gsr-train recall: Invalid value for '--results': r.jsonl does not exist",
    ),
    (
        ("import-kg", "kg.tsv", "--out", "kg"),
        "error: gsr-train import-kg: Invalid value for 'files': kg.tsv does not exist",
    ),
]


@pytest.mark.parametrize("args, message", INPUT_MISTAKES, ids=[m[0][0] for m in INPUT_MISTAKES])
def test_a_verb_given_a_missing_input_refuses_before_torch_loads(tmp_path, args, message):
    """A run folder, exported folder or data folder that is not there: one line and exit 2 as the
    command line is read, before the verb imports torch (under a second; bench/bench_startup.py)."""
    proc = _cli(tmp_path, *args)
    stderr = _messages(proc).strip()
    assert proc.returncode == 2 and stderr.splitlines() == [stderr] and stderr.startswith(message), stderr
    assert not _imported(proc) & set(HEAVY), proc.args


def test_explore_on_a_run_that_did_not_finish_refuses_before_torch_loads(tmp_path):
    """A killed run (its ``running`` mark held by nobody) has no metrics.json: one line saying how to
    continue it, as the command line is read."""
    killed = tmp_path / "outputs" / "killed"
    killed.mkdir(parents=True)
    (killed / "run.json").write_text(json.dumps({"status": "running", "experiment": "x"}))
    proc = _cli(tmp_path, "explore", "outputs/killed")
    stderr = _messages(proc).strip()
    assert proc.returncode == 2 and stderr.splitlines() == [stderr], stderr
    assert "outputs/killed: that run did not finish (status: killed)" in stderr and "resume=auto" in stderr
    assert not _imported(proc) & set(HEAVY)


LLM_MISTAKES = [
    (
        "llm-label-triples",
        "limitt=3",
        "error: limitt: not a key of the config (conf/prep/llm_label_triples.yaml); did you mean limit? "
        "(a new key: +limitt=...)",
    ),
    ("llm-pseudo-questions", "llm=nosuch", "error: llm=nosuch: no such option in conf/llm/ (choices: local, "),
    (
        "llm-select-chains",
        "llm.temprature=0.5",
        "error: llm.temprature: not a key of llm (conf/llm/local.yaml); did you mean llm.temperature?",
    ),
    ("llm-open-questions", "limit=[1,", "error: limit=[1,: Hydra cannot parse this override: no viable alternative"),
]


@pytest.mark.parametrize("verb, override, message", LLM_MISTAKES, ids=[m[0] for m in LLM_MISTAKES])
def test_the_llm_steps_refuse_hydras_mistakes_in_one_line_too(tmp_path, verb, override, message):
    proc = _cli(tmp_path, verb, override)
    stderr = _messages(proc).strip()
    assert proc.returncode == 2, stderr[-3000:]
    assert stderr.splitlines() == [stderr] and stderr.startswith(message), stderr
    assert not (tmp_path / "outputs").exists() and not _imported(proc) & set(HEAVY)


def test_gsr_train_options_prints_every_option_with_type_and_description(capsys):
    from gsr_train.cli import main

    assert main(["options", "subgraphrag_quickstart", "model=subgraphrag_paper"]) == 0
    out = capsys.readouterr().out
    assert "model (conf/model/subgraphrag_paper.yaml;" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("model.dropout ="))
    assert "a number in [0, 1]" in line and "dropout in the MLP" in line
    assert "model.train.epochs = 12  (default 30)" in out  # the quickstart's value and the dataclass's
    assert main(["options"]) == 0 and "reader_webqsp_mini" in capsys.readouterr().out
    assert main(["options", "nosuch"]) == 2
    assert "error: gsr-train options: experiment=nosuch: no such option" in capsys.readouterr().err


def _option_classes():
    from gsr_train.options.check import dataclass_in, fields_of, item_class
    from gsr_train.options.recipes import MODEL_FAMILIES, RECIPES, DataOptions

    todo = [DataOptions, *MODEL_FAMILIES.values()]
    for recipe in RECIPES.values():
        todo += [recipe.top, *(s for s in recipe.sections.values() if isinstance(s, type))]
    seen: dict[str, type] = {}
    while todo:
        cls = todo.pop()
        if cls.__qualname__ in seen:
            continue
        seen[cls.__qualname__] = cls
        for hint, _ in fields_of(cls).values():
            todo += [c for c in (dataclass_in(hint), item_class(hint)) if c is not None]
    return sorted(seen.values(), key=lambda c: c.__qualname__)


def test_every_option_has_a_one_line_description():
    missing = [
        f"{cls.__module__}.{cls.__qualname__}.{f.name}"
        for cls in _option_classes()
        for f in dataclasses.fields(cls)
        if not str(f.metadata.get("description", "")).strip() or "\n" in f.metadata["description"]
    ]
    assert missing == [], "options without a one-line description (gsr_train.config.option): " + ", ".join(missing)


def test_the_defaults_files_are_generated_from_the_dataclasses():
    from gsr_train.options.describe import DEFAULTS_FILES, render

    stale = [spec.path for spec in DEFAULTS_FILES if (REPO / spec.path).read_text() != render(spec)]
    assert stale == [], f"{stale} differ from the option dataclasses: run gsr-train options --write-defaults"


def test_an_experiment_file_saved_with_a_byte_order_mark_is_one_line(tmp_path, capsys):
    """A user's experiment file saved with a UTF-8 BOM (Windows editors): Hydra silently loses its
    '# @package _global_' line and the run fails later on a missing runner; here it is one line naming
    the file, before Hydra composes anything."""
    from gsr_train.options.command_line import run_hydra

    (tmp_path / "experiment").mkdir()
    marked = tmp_path / "experiment" / "mine.yaml"
    marked.write_bytes(b"\xef\xbb\xbf# @package _global_\nrunner: cosine\n")
    (tmp_path / "experiment" / "plain.yaml").write_text("# @package _global_\nrunner: cosine\n")
    called = []
    with pytest.raises(SystemExit) as done:
        run_hydra(lambda: called.append(1), tmp_path, "config", ["+experiment=mine", "top_k=3"])
    assert done.value.code == 2 and not called
    assert capsys.readouterr().err.strip() == (
        f"error: {marked} starts with a UTF-8 byte order mark, which hides its '# @package' line from Hydra; "
        "save it as UTF-8 without a BOM"
    )
    run_hydra(lambda: called.append(1), tmp_path, "config", ["+experiment=plain"])
    assert called == [1]


@pytest.mark.parametrize(
    "argv",
    [
        ["+experiment=subgraphrag_quickstart", "model.hidden=64"],
        ["-m", "+experiment=x", "seed=1,2", "--cfg", "job", "-p", "model"],
        ["--config-name", "other", "a=1", "b=2", "-cd", "/tmp/conf", "--info"],
        ["--info", "defaults", "--resolve", "-cp", "conf", "c=3", "hydra.run.dir=out"],
        ["--experimental-rerun", "f.pickle", "d=4", "--hydra-help"],
    ],
)
def test_overrides_are_read_from_a_command_line_as_hydras_own_parser_reads_them(argv):
    """Issue 49: no private Hydra import in src/; the overrides our refusals name are those Hydra's
    own parser finds (read here from Hydra's internals, so an upgrade that changes its flags fails here)."""
    from hydra._internal.utils import get_args_parser

    from gsr_train.options.command_line import command_line_overrides

    assert command_line_overrides(argv) == get_args_parser().parse_args(argv).overrides
