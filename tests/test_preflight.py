"""Fail fast: a run checks every input it will need before the index, embeddings or training."""

from __future__ import annotations

import pytest

from gsr_train.data.errors import PreflightError

from .conftest import compose_config
from .subgraphrag_toy import toy_run_overrides


def _cfg(tmp_path, **settings):
    return compose_config(toy_run_overrides(tmp_path, settings=settings))


def test_missing_label_file_checkpoint_and_bad_encoder_reported_together_before_work(tmp_path):
    from gsr_train.runs.subgraphrag import run

    cfg = _cfg(
        tmp_path,
        **{
            "+data.labels.test": tmp_path / "nope.jsonl",
            "subgraphrag.eval_only": tmp_path / "missing.ckpt",
            "encoder.name": "no-such-encoder",
        },
    )
    with pytest.raises(PreflightError) as err:
        run(cfg)
    message = str(err.value)
    assert "data.labels.test=" in message and "nope.jsonl does not exist" in message
    assert "subgraphrag.eval_only=" in message and "missing.ckpt" in message
    assert "encoder:" in message and "no-such-encoder" in message
    assert not (tmp_path / "cache" / "kg_index").exists()  # nothing was built


def test_unknown_split_and_missing_split_file_are_named(tmp_path):
    from gsr_train.runs.subgraphrag import run

    cfg = _cfg(tmp_path, **{"subgraphrag.eval_split": "dev"})
    with pytest.raises(PreflightError, match=r"split 'dev' is not in data.splits"):
        run(cfg)
    cfg = _cfg(tmp_path)
    (tmp_path / "data" / "validation.jsonl.gz").unlink()
    with pytest.raises(PreflightError, match=r"no file for split 'validation'"):
        run(cfg)
    assert not (tmp_path / "cache" / "kg_index").exists()


def test_resume_checks_before_training_one_way_to_resume(tmp_path):
    from gsr_train.runs.subgraphrag import run

    cfg = _cfg(tmp_path, **{"resume": tmp_path / "gone" / "last.ckpt"})
    with pytest.raises(PreflightError, match="resume=.*last.ckpt does not exist"):
        run(cfg)
    other = tmp_path / "other_run" / "checkpoints" / "last.ckpt"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"x")
    with pytest.raises(PreflightError, match=r"belongs to the run folder .*other_run.*hydra.run.dir=.*resume=auto"):
        run(_cfg(tmp_path, **{"resume": other}))
    with pytest.raises(PreflightError, match="subgraphrag.ckpt_path is gone"):
        run(_cfg(tmp_path, **{"+subgraphrag.ckpt_path": other}))
    assert not (tmp_path / "cache" / "kg_index").exists()


def test_cosine_run_checks_its_label_file(tmp_path):
    from gsr_train.runs.cosine import run

    overrides = toy_run_overrides(tmp_path, settings={"+data.labels.test": tmp_path / "labels.jsonl"})
    overrides = [o for o in overrides if not o.startswith(("+experiment=", "model."))] + ["+experiment=cosine_baseline"]
    with pytest.raises(PreflightError, match="data.labels.test=.*labels.jsonl does not exist"):
        run(compose_config(overrides))


def test_a_data_dir_is_a_folder_of_splits_a_file_of_every_split_or_a_hub_name(tmp_path):
    """``data.dir`` as the loaders read it (`gsr_train.data.rows.iter_records`): a file that exists holds
    every split; a path that is not there is named; a hub dataset name is left to the hub."""
    from omegaconf import OmegaConf

    from gsr_train.options.inputs import split_problems

    rows = tmp_path / "all.jsonl"
    rows.write_text("")

    def problems(data_dir: str) -> list[str]:
        return list(split_problems(OmegaConf.create({"data": {"dir": data_dir, "splits": ["test"]}})))

    assert problems(str(rows)) == []
    assert problems(str(tmp_path / "gone.jsonl")) == [f"data.dir={tmp_path / 'gone.jsonl'} does not exist"]
    assert problems(str(tmp_path / "gone")) == [f"data.dir={tmp_path / 'gone'} does not exist"]
    assert problems("rmanluo/RoG-webqsp") == []
    assert problems(str(tmp_path)) == [
        f"data.dir: no file for split 'test' in {tmp_path} (looked for test{{.jsonl.gz,.jsonl,.json.gz,.json,"
        ".parquet,.arrow} and [data/]test-*.parquet)"
    ]
