"""Recipes are checked before any work: a misspelled model option, a model of another family
and two settings for one thing (epochs) are one clear message each."""

from __future__ import annotations

from pathlib import Path

import pytest

from gsr_train.models.subgraphrag.scorer import ScorerConfig
from gsr_train.runs.common import PreflightError

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
    from gsr_train.runs.common import one_setting

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

    from gsr_train.runs.recipes import RECIPES, recipe_errors

    cfg = compose_config([f"+experiment={name}", "paths.output_dir=/tmp/x", f"experiment_name={name}"])
    assert cfg.runner in RECIPES, f"{name}: runner {cfg.runner} has no typed recipe in gsr_train.runs.recipes"
    plain = OmegaConf.to_container(cfg, resolve=False)
    plain.pop("hydra", None)
    assert recipe_errors(plain) == []


def test_unknown_keys_anywhere_are_named_with_their_file_and_closest_option(tmp_path):
    from gsr_train.runs.common import run_experiment, user_errors
    from gsr_train.runs.recipes import RecipeError

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
        "subgraphrag: not an option of runner gsr (conf/experiment/gsr_defaults.yaml)",
        "gsr.decode.beam: not a DecodeConfig option (conf/experiment/gsr_defaults.yaml); "
        "did you mean gsr.decode.beams?",
        "gsr.decod: not a GSRRun option (conf/experiment/gsr_defaults.yaml); did you mean gsr.decode?",
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
