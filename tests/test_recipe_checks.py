"""Recipes are checked before any work: a misspelled model option, a model of another family
and two settings for one thing (epochs) are one clear message each."""

from __future__ import annotations

from pathlib import Path

import pytest

from gsr_train.data.errors import PreflightError
from gsr_train.models.subgraphrag.scorer import ScorerConfig

from .conftest import compose_config
from .subgraphrag_toy import toy_run_overrides


def _toy(tmp_path, **settings):
    return compose_config(toy_run_overrides(tmp_path, settings=settings))


def test_misspelled_subgraphrag_option_is_named(tmp_path):
    from gsr_train.runs.subgraphrag import run

    with pytest.raises(PreflightError, match=r"\['hiden'\] are not SubgraphRAG options"):
        run(_toy(tmp_path, **{"+model.hiden": 64}))
    assert not (tmp_path / "cache" / "kg_index").exists()
    with pytest.raises(ValueError, match="'hiden'"):
        ScorerConfig.from_options({"hiden": 3}, 8)


def test_model_of_another_family_is_refused(tmp_path):
    from gsr_train.runs.gsr import run as run_gsr
    from gsr_train.runs.subgraphrag import run

    overrides = [o for o in toy_run_overrides(tmp_path) if not o.startswith("model.")] + ["model=gsr_tiny"]
    with pytest.raises(
        PreflightError, match="model=gsr_tiny is a t5 model; the subgraphrag runner needs a subgraphrag model"
    ):
        run(compose_config(overrides))
    cfg = compose_config(
        [
            "+experiment=gsr_quickstart",
            "model=subgraphrag",
            f"paths.output_dir={tmp_path}",
            f"paths.cache_dir={tmp_path / 'c'}",
        ]
    )
    with pytest.raises(PreflightError, match="model=subgraphrag is a subgraphrag model; the gsr runner"):
        run_gsr(cfg)


@pytest.mark.parametrize(
    "experiment,used",
    [
        ("subgraphrag_quickstart", "model.train.epochs"),
        ("gsr_quickstart", "model.epochs"),
        ("reader_webqsp_mini", "qa.train.epochs"),
    ],
)
def test_two_settings_for_epochs_are_an_error_and_one_follows_the_other(tmp_path, experiment, used):
    from gsr_train.options.preflight import one_setting

    base = [f"+experiment={experiment}", f"paths.output_dir={tmp_path}"]
    cfg = compose_config(base)
    one_setting(cfg, used)  # the trainer follows the recipe's value
    cfg = compose_config([*base, f"{used}=3"])
    assert cfg.trainer.max_epochs == 3
    cfg = compose_config([*base, "trainer.max_epochs=7", f"{used}=3"])
    with pytest.raises(PreflightError, match=f"trainer.max_epochs=7 and {used}=3"):
        one_setting(cfg, used)


@pytest.mark.parametrize(
    "name",
    sorted(
        p.stem
        for p in (Path(__file__).resolve().parents[1] / "conf" / "experiment").glob("*.yaml")
        if not p.stem.endswith("_defaults")
    ),
)
def test_every_experiment_follows_its_typed_recipe(name):
    from omegaconf import OmegaConf

    from gsr_train.options.check import recipe_errors, value_errors
    from gsr_train.options.recipes import RECIPES

    cfg = compose_config([f"+experiment={name}", "paths.output_dir=/tmp/x", f"experiment_name={name}"])
    assert cfg.runner in RECIPES, f"{name}: runner {cfg.runner} has no typed recipe in gsr_train.options.recipes"
    plain = OmegaConf.to_container(cfg, resolve=False)
    plain.pop("hydra", None)
    assert recipe_errors(plain) == []
    assert value_errors(plain) == []  # every shipped value has the type and range its recipe says


@pytest.mark.parametrize(
    "experiment, override, message",
    [
        (
            "subgraphrag_quickstart",
            "top_k=ten",
            "top_k=ten: expected an integer (conf/recipes/subgraphrag_defaults.yaml)",
        ),
        (
            "subgraphrag_quickstart",
            "model.train.epochs=1.5",
            "model.train.epochs=1.5: expected an integer (conf/model/subgraphrag.yaml)",
        ),
        (
            "subgraphrag_quickstart",
            "model.dropout=2",
            "model.dropout=2: expected in [0, 1] (conf/model/subgraphrag.yaml)",
        ),
        (
            "subgraphrag_quickstart",
            "subgraphrag.serving=fast",
            "subgraphrag.serving=fast: expected one of auto, compiled, torch (conf/recipes/subgraphrag_defaults.yaml)",
        ),
        (
            "gsr_quickstart",
            "gsr.decode.beams=-2",
            "gsr.decode.beams=-2: expected >= 1 (conf/recipes/gsr_defaults.yaml)",
        ),
        ("gsr_quickstart", "model.epochs=1.5", "model.epochs=1.5: expected an integer"),
        ("cosine_baseline", "top_k=0", "top_k=0: expected >= 1 (conf/experiment/cosine_baseline.yaml)"),
        (
            "retrieve",
            "retriever.train.val_k=0",
            "retriever.train.val_k=0: expected >= 1 (conf/experiment/retrieve.yaml)",
        ),
        ("retrieve", "seed=abc", "seed=abc: expected an integer (conf/config.yaml)"),
        ("retrieve", "eval_ks=[10,x]", "eval_ks=[10, 'x']: expected a list of integers (conf/config.yaml)"),
    ],
)
def test_a_wrong_type_or_range_is_one_line_naming_key_expectation_and_file(experiment, override, message):
    from gsr_train.options.check import RecipeError, check_recipe

    cfg = compose_config([f"+experiment={experiment}", override, f"experiment_name={experiment}"])
    with pytest.raises(RecipeError) as e:
        check_recipe(cfg)
    assert str(e.value).startswith(message) and "\n" not in str(e.value), str(e.value)


def test_a_wrong_value_stops_train_py_before_any_work(tmp_path):
    import os
    import subprocess
    import sys

    from .conftest import REPO

    proc = subprocess.run(
        [sys.executable, str(REPO / "train.py"), "+experiment=subgraphrag_quickstart", "top_k=ten"],
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "GSR_TRAIN_CACHE": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: top_k=ten: expected an integer")
    assert not (tmp_path / "cache").exists()  # nothing was built


def test_unknown_keys_anywhere_are_named_with_their_file_and_closest_option(tmp_path):
    from gsr_train.options.check import RecipeError
    from gsr_train.runs.experiment import run_experiment, user_errors

    assert issubclass(RecipeError, user_errors())  # printed as one message by train.py, no traceback

    cfg = compose_config(
        [
            "+experiment=gsr_quickstart",
            f"paths.output_dir={tmp_path}",
            f"paths.cache_dir={tmp_path / 'c'}",
            "experiment_name=x",
            "+gsr.decode.beam=3",
            "+gsr.decod=3",
            "+subgraphrag.top_k=3",
            "+model.optim.lrr=1",
            "+model.config.d_foo=1",
        ]
    )
    with pytest.raises(RecipeError) as err:
        run_experiment(cfg)
    lines = str(err.value).splitlines()[1:]
    assert [x.strip() for x in lines] == [
        "subgraphrag: not an option of runner gsr (conf/recipes/gsr_defaults.yaml)",
        "gsr.decode.beam: not a DecodeConfig option (conf/recipes/gsr_defaults.yaml); did you mean gsr.decode.beams?",
        "gsr.decod: not a GSRRun option (conf/recipes/gsr_defaults.yaml); did you mean gsr.decode?",
        "model.optim.lrr: not a GSROptim option (conf/model/gsr_tiny.yaml); did you mean model.optim.lr?",
    ]
    assert not (tmp_path / "c").exists()  # nothing ran
    reader = compose_config(
        [
            "+experiment=reader_webqsp_mini",
            f"paths.output_dir={tmp_path}",
            "experiment_name=x",
            "+qa.retrieval.optons={a: 1}",
            "+reader.lora.rank=4",
        ]
    )
    with pytest.raises(
        RecipeError,
        match=r"(?s)qa.retrieval.optons: not a QARetrieval option .*did you mean "
        r"qa.retrieval.options\?.*reader.lora.rank: not a LoRA option "
        r"\(conf/reader/smollm2.yaml\)",
    ):
        run_experiment(reader)


def _disagreements(yaml_values: dict, defaults: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in yaml_values.items():
        if key not in defaults:
            out.append(f"{prefix}{key}: not in the dataclass")
        elif isinstance(value, dict) and isinstance(defaults[key], dict):
            if defaults[key] or not value:  # an open mapping (dict field, empty default) holds anything
                out += _disagreements(value, defaults[key], f"{prefix}{key}.")
        elif value != defaults[key]:
            out.append(f"{prefix}{key}: YAML {value!r}, dataclass {defaults[key]!r}")
    return out


@pytest.mark.parametrize(
    "path, section, cls",
    [
        ("conf/recipes/subgraphrag_defaults.yaml", "subgraphrag", "gsr_train.options.recipes:SubgraphRAGRun"),
        ("conf/model/subgraphrag_paper.yaml", None, "gsr_train.models.subgraphrag.options:SubgraphRAGModel"),
        ("conf/recipes/classic_defaults.yaml", "classic", "gsr_train.retrievers.classic:ClassicRun"),
        ("conf/recipes/gsr_defaults.yaml", "gsr", "gsr_train.options.recipes:GSRRun"),
        ("conf/recipes/reader_defaults.yaml", "qa", "gsr_train.options.recipes:QARun"),
        ("conf/robustness/default.yaml", None, "gsr_train.options.recipes:RobustnessRun"),
        ("conf/recipes/okgqa_defaults.yaml", "open_ended", "gsr_train.options.recipes:OpenEndedRun"),
    ],
)
def test_the_defaults_files_restate_the_dataclass_defaults(path, section, cls):
    """One set of defaults: a runner's defaults file says what its typed dataclass says (the other
    files override them), and the code fills what a config leaves out from the same dataclass."""
    import importlib

    import yaml

    from gsr_train.config import defaults_of

    from .conftest import REPO

    module, _, name = cls.partition(":")
    values = yaml.safe_load((REPO / path).read_text())
    values = values[section] if section else values
    assert _disagreements(values, defaults_of(getattr(importlib.import_module(module), name))) == []


def test_runner_and_module_fill_missing_options_from_the_dataclasses():
    from gsr_train.config import defaults_of
    from gsr_train.models.subgraphrag.module import DEFAULT_OPTIM
    from gsr_train.models.subgraphrag.options import SubgraphRAGOptim, SubgraphRAGTrain
    from gsr_train.options.preflight import SUBGRAPHRAG_DEFAULTS as DEFAULTS
    from gsr_train.options.preflight import SUBGRAPHRAG_TRAIN_DEFAULTS as TRAIN_DEFAULTS
    from gsr_train.options.recipes import ClassicRun, SubgraphRAGRun
    from gsr_train.retrievers.classic import DEFAULTS as CLASSIC

    assert DEFAULTS == defaults_of(SubgraphRAGRun) and TRAIN_DEFAULTS == defaults_of(SubgraphRAGTrain)
    assert {k: v for k, v in DEFAULT_OPTIM.items() if k != "fused"} == defaults_of(SubgraphRAGOptim)
    assert CLASSIC == {k: v for k, v in defaults_of(ClassicRun).items() if k != "method"}

    # and what the code does with a config that leaves them out: it fills them from the dataclasses
    from omegaconf import OmegaConf

    from gsr_train.models.subgraphrag.module import SubgraphRAGModule
    from gsr_train.options.preflight import subgraphrag_settings as settings
    from gsr_train.retrievers.classic import merge_options

    cfg = OmegaConf.create({"subgraphrag": {"top_k_unused": None}, "model": {"hidden": 8, "train": {"epochs": 2}}})
    del cfg.subgraphrag["top_k_unused"]
    run, _, train = settings(cfg)
    assert run["threads"] == SubgraphRAGRun().threads and run["serving"] == SubgraphRAGRun().serving
    assert train["epochs"] == 2 and train["patience"] == SubgraphRAGTrain().patience
    assert train["optim"]["lr"] == SubgraphRAGOptim().lr
    module = SubgraphRAGModule({"hidden": 8}, dim=4)
    assert module.optim_cfg["weight_decay"] == SubgraphRAGOptim().weight_decay and module.loss_cfg["listwise"] == 0.0
    assert merge_options({})["pcst"]["budget"] == ClassicRun().pcst.budget


@pytest.mark.parametrize(
    "experiment, old",
    [
        ("subgraphrag_quickstart", "subgraphrag.top_k=10"),
        ("gsr_quickstart", "+gsr.decode.top_n=5"),
        ("reader_webqsp_mini", "+qa.k=5"),
        ("robustness_quickstart", "+robustness.report_k=50"),
    ],
)
def test_an_old_name_of_the_kept_k_is_one_line_naming_top_k(experiment, old):
    from gsr_train.options.check import RecipeError, check_recipe

    if old.startswith("subgraphrag.top_k"):  # no longer in the config: only addable, as a user's old command would
        old = "+" + old
    cfg = compose_config([f"+experiment={experiment}", old, f"experiment_name={experiment}"])
    with pytest.raises(RecipeError) as e:
        check_recipe(cfg)
    key = old.lstrip("+").split("=")[0]
    assert str(e.value).splitlines()[-1].strip() == (
        f"{key}: renamed to top_k (one name for how many a run keeps, in every method and in eval.py)"
    ), str(e.value)


def test_eval_moves_an_old_run_folders_k_to_top_k():
    from omegaconf import OmegaConf

    from gsr_train.options.eval_config import migrate_renamed

    old = OmegaConf.create({"runner": "gsr_train.runs.gsr.run", "gsr": {"decode": {"beams": 4, "top_n": 7}}})
    migrate_renamed(old)
    assert old.top_k == 7 and "top_n" not in old.gsr.decode and old.gsr.decode.beams == 4
    kept = OmegaConf.create({"runner": "reader", "top_k": 3, "qa": {"k": 9}})
    migrate_renamed(kept)
    assert kept.top_k == 3 and "k" not in kept.qa


def test_a_checked_section_is_built_as_its_recipe_dataclass():
    """Issue 49: what a runner's stages read is the section as its typed dataclass (`built`): the
    defaults where the config is silent, interpolations resolved, an open section's own keys left
    out; a value the check leaves for later (``???``) is one RecipeError naming the section."""
    from omegaconf import OmegaConf

    from gsr_train.options.check import RecipeError, built
    from gsr_train.options.recipes import DataOptions
    from gsr_train.readers.options import EvidenceSource, QARun

    cfg = OmegaConf.create(
        {"split": "dev", "qa": {"format": "triples", "eval_split": "${split}", "retrieval": {"sources": [{"k": 3}]}}}
    )
    qa = built(QARun, cfg.qa)
    assert (qa.format, qa.eval_split, qa.train.lr, qa.reading.method) == ("triples", "dev", 2e-4, "causal-lm")
    assert qa.retrieval.sources == [EvidenceSource(k=3)]
    assert built(QARun, None) == QARun()
    assert built(DataOptions, {"dir": "x", "workers": 2}) == DataOptions(workers=2)
    with pytest.raises(RecipeError, match="QARun options: .*eval_split"):
        built(QARun, OmegaConf.create({"qa": {"eval_split": "???"}}).qa)


def test_an_open_ended_run_reads_its_recipe_not_the_config(tmp_path):
    """Issue 49: OKGQA's open-ended runners build an `OpenEndedRecipe` once; its stages read typed
    values (nested sections too), the data's name as reports print it, and the run's place."""
    from omegaconf import OmegaConf

    from gsr_train.robustness.options import KGEConfig
    from gsr_train.runs.open_ended import _answer_params, _options, open_ended_recipe

    overrides = ["+experiment=okgqa_perturbed", "open_ended.max_questions=3", "open_ended.perturb.kge.dim=8"]
    cfg = compose_config(overrides)
    OmegaConf.update(cfg, "paths.output_dir", str(tmp_path / "run"))
    OmegaConf.update(cfg, "paths.cache_dir", str(tmp_path / "cache"))
    r = open_ended_recipe(cfg)
    assert r.oe.max_questions == 3 and isinstance(r.oe.perturb.kge, KGEConfig) and r.oe.perturb.kge.dim == 8
    assert (r.split, r.top_k, r.judges_only, r.data_name) == ("test", int(cfg.top_k), False, str(cfg.data.name))
    assert r.place.out == tmp_path / "run" and r.place.cache_dir == tmp_path / "cache"
    assert _options(r).geval.criteria == tuple(cfg.open_ended.geval.criteria)
    assert _answer_params(r) == ({"repetition_penalty": 1.3} if cfg.llm.get("autostart") else {})
    OmegaConf.update(cfg, "data.kg", "my_kg", force_add=True)
    OmegaConf.update(cfg, "open_ended.questions", "q/my_questions.jsonl")
    assert open_ended_recipe(cfg).data_name == "my_questions.jsonl on my_kg"  # the questions' graphs cut from data.kg
