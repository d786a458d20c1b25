"""The GSR relation vocabulary by source: the KG's, the training chains', a relation file's, or all."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from gsr_train.data.errors import PreflightError
from gsr_train.datamodules.gsr_chains import ChainQuestion
from gsr_train.datamodules.gsr_prepare import GSRData
from gsr_train.options.check import built
from gsr_train.options.recipes import GSRRun
from gsr_train.runs.gsr import relation_vocab


def _cfg(source, file=None):
    cfg = OmegaConf.create({"gsr": {"relations": {"source": source, "file": file, "keep": "relations"}}})
    return built(GSRRun, cfg.gsr)


def test_every_source_and_its_order(shared_data):
    data = GSRData(
        [ChainQuestion("q", "?", [("chain.only.rel",), ("people.person.nationality",)], [])],
        [],
        [],
        "eval",
        None,
        ["people.person.nationality", "kg.only.relation"],
    )
    assert relation_vocab(_cfg("kg"), data) == ["people.person.nationality", "kg.only.relation", "chain.only.rel"]
    assert relation_vocab(_cfg("chains"), data) == ["chain.only.rel", "people.person.nationality"]
    listed = shared_data / "freebase_relations.txt"
    from_file = relation_vocab(_cfg("file", str(listed)), data)
    everything = relation_vocab(_cfg("all", str(listed)), data)
    assert len(from_file) > 19_000 and "kg.only.relation" not in from_file
    assert everything[:2] == ["people.person.nationality", "kg.only.relation"]
    assert set(everything) == set(from_file) | {"kg.only.relation"} and len(everything) == len(set(everything))
    with pytest.raises(PreflightError, match="needs gsr.relations.file"):
        relation_vocab(_cfg("all"), data)
