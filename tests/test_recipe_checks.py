"""Recipes are checked before any work: a misspelled model option, a model of another family
and two settings for one thing (epochs) are one clear message each."""
from __future__ import annotations

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
    with pytest.raises(PreflightError, match="model=gsr_tiny is a t5 model; the subgraphrag runner needs a "
                                             "subgraphrag model"):
        run(compose_config(overrides))
    cfg = compose_config(["+experiment=gsr_quickstart", "model=subgraphrag", f"paths.output_dir={tmp_path}",
                          f"paths.cache_dir={tmp_path / 'c'}"])
    with pytest.raises(PreflightError, match="model=subgraphrag is a subgraphrag model; the gsr runner"):
        run_gsr(cfg)


@pytest.mark.parametrize("experiment,used", [("subgraphrag_quickstart", "model.train.epochs"),
                                             ("gsr_quickstart", "model.epochs"),
                                             ("reader_webqsp_mini", "qa.train.epochs")])
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
