"""Transfer to unseen relations: the held-out relations are fixed by name, the questions that use
them leave training, and GSR runs report match on the test questions that need an unseen relation."""

from __future__ import annotations

import json

import pytest

from gsr_train.datamodules.gsr_chains import ChainQuestion
from gsr_train.datamodules.relation_holdout import drop_questions_using, held_out_relations, vocabulary_groups

from .conftest import compose_config, quiet

RELS = [f"domain{i}.type{i % 7}.prop{i}" for i in range(2000)]


def test_held_out_relations_are_a_fixed_share_chosen_by_name():
    held = held_out_relations(RELS, 0.2)
    assert 0.17 < len(held) / len(RELS) < 0.23
    assert held == held_out_relations(list(reversed(RELS)), 0.2)  # order does not matter
    assert held_out_relations(RELS[:100], 0.2) == held & set(RELS[:100])  # a name's fate is its own
    assert held != held_out_relations(RELS, 0.2, seed=1) and held_out_relations(RELS, 0.0) == set()
    assert held <= held_out_relations(RELS, 0.4)  # nested in the fraction
    with pytest.raises(ValueError, match="fraction"):
        held_out_relations(RELS, 1.0)


def test_questions_using_a_held_out_relation_in_any_chain_are_dropped():
    qs = [
        ChainQuestion("a", "q", [("r1",)], [("r1",)]),
        ChainQuestion("b", "q", [("r2", "r3")], [("r4",)]),
        ChainQuestion("c", "q", [("r1",)], [("r1", "r2")]),
        ChainQuestion("d", "q", [("r5",)], [("r5",)]),
    ]
    kept, dropped = drop_questions_using(qs, {"r2", "r9"}, extra_chains={"d": [("r9",)]})
    assert [q.id for q in kept] == ["a"] and dropped == 3


def test_vocabulary_groups_need_one_fully_seen_ground_chain():
    ground = [[("a", "b")], [("a", "x"), ("b",)], [("x",)], [], [("a", "y"), ("y",)]]
    assert vocabulary_groups(ground, {"a", "b"}) == {"seen": [0, 1], "unseen": [2, 4]}


@pytest.mark.parametrize("head", ["token", "open"])
@pytest.mark.slow
def test_leave_relations_out_run_reports_seen_and_unseen_columns(tmp_path, shared_data, capsys, head):
    from gsr_train.datamodules.gsr_chains import load_path_rows
    from gsr_train.runs.experiment import run_experiment

    from .test_experiments_e2e import GSR_SMALL, paths_cut

    chains, graphs = paths_cut(tmp_path, shared_data)
    out = tmp_path / "run"
    overrides = [
        "+experiment=gsr_leave_relations_out",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "experiment_name=lro",
        *quiet(),
        f"data.dir={chains}",
        f"data.graphs={graphs}",
        "data.graph_splits=[test]",
        *GSR_SMALL,
        "gsr.max_eval_questions=null",
        "model.batch_size=16",
        "gsr.holdout.fraction=0.3",
        f"model.relation_head={head}",
    ]
    run_experiment(compose_config([*overrides, f"paths.output_dir={out}"]))
    doc = json.loads((out / "metrics.json").read_text())
    hold = doc["data"]["holdout"]
    # the same relations and questions, recomputed from the files
    train = load_path_rows(chains, "train")
    train_rels = {r for row in train for c in row.ground_paths for r in c}
    held = held_out_relations(train_rels, 0.3)
    uses = [any(r in held for c in [*row.ground_paths, *(row.llm_paths or [])] for r in c) for row in train]
    assert hold["relations_held_out"] == len(held) > 0 and hold["train_dropped"] == sum(uses) > 0
    assert hold["train_kept"] == len(train) - sum(uses) == doc["data"]["train_questions"]
    seen = {r for row, u in zip(train, uses) if not u for c in row.ground_paths for r in c}
    test = [row for row in load_path_rows(chains, "test") if row.ground_paths]
    unseen = [row for row in test if not any(all(r in seen for r in c) for c in row.ground_paths)]
    for mode in ("unconstrained", "constrained"):
        groups = doc[mode]["match_by_group"]
        assert groups["unseen"]["questions"] == len(unseen) > 0
        assert groups["seen"]["questions"] + groups["unseen"]["questions"] == doc[mode]["chain_match"]["questions"]
    row = doc["rows"][0]
    assert row["unseen_n"] == len(unseen) and "unseen_match@1" in row["metrics"] and "seen_match@3" in row["metrics"]
    assert "| decoding | questions | match@1 | match@3 | seen |" in capsys.readouterr().out
    saved = json.loads((out / "model" / "gsr_config.json").read_text())
    assert saved["spec"]["relation_head"] == head
    assert saved["chain_relations"] == sorted(seen)  # "seen" travels with the model
    if head == "open":  # an eval-only run of the saved model reports the same transfer columns
        again = tmp_path / "again"
        run_experiment(compose_config([*overrides, f"paths.output_dir={again}", f"gsr.eval_only={out / 'model'}"]))
        redo = json.loads((again / "metrics.json").read_text())
        for mode in ("unconstrained", "constrained"):
            assert redo[mode]["match_by_group"] == doc[mode]["match_by_group"]
            assert redo[mode]["chain_match"] == doc[mode]["chain_match"]
