"""Multi-hop random walks for GSR: real paths of the KG, told as composed questions, mixed into
training at the asked rate, and refused early when misconfigured."""

from __future__ import annotations

import json
import re

import pytest

from gsr_train.datamodules.gsr_chains import META_PREFIXES
from gsr_train.datamodules.gsr_walks import Walk, sample_walks, walk_examples, walk_question, walk_summary

from .conftest import compose_config, quiet


@pytest.fixture(scope="module")
def mini_index(webqsp_mini, tmp_path_factory):
    from gsr_train.kg.index import get_index

    return get_index(webqsp_mini, splits=("train", "validation", "test"), cache_dir=tmp_path_factory.mktemp("cache"))


def _triples(index, splits) -> dict[tuple[str, str], set[str]]:
    """The splits' triples by name, as ``(head, relation) -> tails``."""
    out: dict[tuple[str, str], set[str]] = {}
    for s in splits:
        h, r, t = index[s].global_edges().T.numpy()
        names = zip(index.entities.take(h), index.relations.take(r), index.entities.take(t))
        for head, rel, tail in names:
            out.setdefault((head, rel), set()).add(tail)
    return out


def _follows(triples, subject, chain):
    """Entities reached from ``subject`` along ``chain`` (stored directions)."""
    frontier = {subject}
    for rel in chain:
        frontier = {t for h in frontier for t in triples.get((h, rel), ())}
    return frontier


@pytest.mark.slow
def test_walks_are_paths_of_the_kg_within_the_asked_lengths(mini_index):
    splits = ("train",)
    walks = sample_walks(mini_index, splits, count=300, min_hops=2, max_hops=4, starts="topics", seed=3)
    assert len(walks) == 300 == len(set(walks))
    triples = _triples(mini_index, splits)
    topics = set()
    g = mini_index["train"]
    topics = {mini_index.entities[int(e)] for e in g.entity_ids[g.topic_mask].tolist()}
    lengths = set()
    for w in walks:
        assert w.subject in topics
        assert 2 <= len(w.chain) <= 4
        lengths.add(len(w.chain))
        assert all(a != b for a, b in zip(w.chain, w.chain[1:]))
        assert not any(r.startswith(META_PREFIXES) for r in w.chain)
        assert _follows(triples, w.subject, w.chain), w
    assert lengths == {2, 3, 4}
    summary = walk_summary(walks)
    assert summary["walks"] == 300 and sum(summary["walks_by_hops"].values()) == 300


def test_walks_are_seeded_and_avoid_excluded_starts(mini_index):
    splits = ("train", "validation", "test")
    a = sample_walks(mini_index, splits, count=200, starts="named", seed=0)
    assert a == sample_walks(mini_index, splits, count=200, starts="named", seed=0)
    assert a != sample_walks(mini_index, splits, count=200, starts="named", seed=1)
    banned = {w.subject for w in a[:50]}
    b = sample_walks(mini_index, splits, count=200, starts="named", exclude=banned, seed=0)
    assert b and not banned & {w.subject for w in b}
    assert not any(w.subject.startswith("m.") for w in a)  # CVT ids never serve as subjects
    one_hop = sample_walks(mini_index, splits, count=50, min_hops=1, max_hops=1, seed=0)
    assert {len(w.chain) for w in one_hop} == {1}
    with pytest.raises(ValueError, match="min_hops <= max_hops"):
        sample_walks(mini_index, splits, count=5, min_hops=3, max_hops=2)
    with pytest.raises(ValueError, match="starts"):
        sample_walks(mini_index, splits, count=5, starts="everything")


def test_walk_questions_read_the_chain_outwards():
    w = Walk("jamaica", ("location.location.containedby", "location.country.languages_spoken"))
    q = walk_question(w)
    assert "the containedby of jamaica" in q and "languages spoken" in q
    assert q == walk_question(w)  # fixed per walk and seed
    mediator = walk_question(Walk("x", ("people.person.spouse_s", "people.marriage.spouse")))
    assert "the spouse of x" in mediator and "spouse s" not in mediator
    ex = walk_examples([w])
    assert ex[0].chain == w.chain and ex[0].text == q


def test_datamodule_mixes_walks_at_the_asked_ratio():
    from gsr_train.datamodules.gsr_data import GSRDataModule, Seq2SeqItem, walk_items
    from gsr_train.datamodules.gsr_walks import WalkExample
    from gsr_train.features.relation_tokens import INDEX_PREFIX

    class Vocab:  # the two members of RelationTokens that walk_items reads
        lookup = {"a.b.c": 0, "a.b.d": 1, "a.b.e": 2}

        def indices(self, chain):
            return [self.lookup[r] for r in chain]

    rels = Vocab()
    examples = [WalkExample(f"walk {i}", ("a.b.c", "a.b.d")) for i in range(30)]
    examples.append(WalkExample("unknown", ("a.b.c", "z.z.z")))
    pool, dropped = walk_items(examples, rels, INDEX_PREFIX)
    assert dropped == 1 and len(pool) == 30 and pool[0].targets == [(0, 1)] and pool[0].prefix == INDEX_PREFIX
    retrieval = [Seq2SeqItem("[Retrieval]", f"q{i}", [(2,)]) for i in range(40)]
    index = [Seq2SeqItem(INDEX_PREFIX, f"i{i}", [(0,)]) for i in range(40)]
    plain = GSRDataModule(None, retrieval, index, [], index_ratio=0.5, seed=1)
    mixed = GSRDataModule(None, retrieval, index, [], index_ratio=0.5, seed=1, walk_pool=pool, walk_ratio=0.25)
    for epoch in range(3):
        items = mixed.epoch_items(epoch)
        assert sum(it.text.startswith("walk") for it in items) == 10
        assert len(items) == len(plain.epoch_items(epoch)) + 10
    # no walks in an indexing-only epoch
    staged = GSRDataModule(
        None, retrieval, index, [], schedule="index_then_joint", index_epochs=1, walk_pool=pool, walk_ratio=0.25
    )
    assert not any(it.text.startswith("walk") for it in staged.epoch_items(0))
    assert sum(it.text.startswith("walk") for it in staged.epoch_items(1)) == 10


@pytest.mark.parametrize(
    "override, message",
    [
        ("gsr.walks.prefix=question", "gsr.walks.prefix must be retrieval | index"),
        ("gsr.walks.starts=all", "gsr.walks.starts must be one of"),
        ("gsr.walks.max_hops=1", "min_hops <= max_hops"),
        ("gsr.walks.ratio=0", "needs gsr.walks.ratio > 0"),
    ],
)
def test_walk_mistakes_are_one_message_before_any_work(tmp_path, override, message, capsys):
    _one_message_before_any_work(tmp_path, ["gsr.walks.count=10", override], message)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["gsr.index.kg_share=2"], "gsr.index.kg_share must be a share in [0, 1]"),
        (["gsr.index.kg_share=half"], "gsr.index.kg_share must be a share in [0, 1]"),
        (["gsr.index.kg_share=0.5", "gsr.schedule=retrieval"], "gsr.schedule=retrieval has none"),
    ],
)
def test_index_share_mistakes_are_one_message_before_any_work(tmp_path, overrides, message):
    _one_message_before_any_work(tmp_path, overrides, message)


def _one_message_before_any_work(tmp_path, overrides, message):
    from gsr_train.data.errors import PreflightError
    from gsr_train.runs.gsr import run

    cfg = compose_config(
        [
            "+experiment=gsr_quickstart",
            f"paths.output_dir={tmp_path}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            "logger=none",
            *overrides,
        ]
    )
    with pytest.raises(PreflightError, match=re.escape(message)):
        run(cfg)
    assert not (tmp_path / "cache").exists()  # nothing was built


@pytest.mark.slow
def test_run_with_walks_trains_on_them_and_reports_them(tmp_path):
    from gsr_train.runs.experiment import run_experiment

    from .test_gsr_run import SMALL

    out = tmp_path / "run"
    cfg = compose_config(
        [
            "+experiment=gsr_quickstart",
            f"paths.output_dir={out}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            "experiment_name=walks",
            "model.epochs=1",
            *quiet(),
            "gsr.decode.beams=4",
            "gsr.walks.count=80",
            "gsr.walks.ratio=0.5",
            *[f"+data.synthetic.{s}" for s in SMALL],
        ]
    )
    run_experiment(cfg)
    doc = json.loads((out / "metrics.json").read_text())
    data = doc["data"]
    assert cfg.gsr.schedule == "joint"
    # the one epoch's steps count the walk examples: ratio x retrieval questions of them
    n = data["retrieval_items"]
    items = n + min(data["index_pool"], round(float(cfg.gsr.index_ratio) * n)) + min(data["walk_pool"], round(0.5 * n))
    assert doc["fit"]["total_steps"] == -(-items // int(cfg.model.batch_size))
    assert min(data["walk_pool"], round(0.5 * n)) > 0
    assert data["walks"] > 0 and data["walk_pool"] == data["walks"] - data.get("walks_outside_vocab", 0) > 0
    assert set(data["walks_by_hops"]) <= {"2", "3", "4"}
