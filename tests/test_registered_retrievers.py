"""Every method of the papers is buildable by name through the retriever interface: PPR ranks
edges the way its pruning grows, and SimGRAG / SAFE build their patterns once and match them on
any version of the served split (a subset, a perturbed copy), by question id."""

from __future__ import annotations

import pytest
import torch

from gsr_train.kg.index import build_index
from gsr_train.retrievers.interface import RetrievalInputs, Retriever
from gsr_train.retrievers.registry import build, names
from gsr_train.text.embeddings import get_embeddings
from gsr_train.text.encoders import HashingEncoder
from tests.patterns_helpers import tiny_dataset
from tests.robustness_helpers import toy_index


def test_every_method_of_the_papers_is_registered():
    assert {
        "cosine",
        "subgraphrag",
        "gsr",
        "classic-triplets",
        "classic-paths",
        "classic-pcst",
        "ppr",
        "simgrag",
        "safe",
    } <= set(names())


@pytest.mark.parametrize("top_nodes", [1, 3, 7, 1000])
def test_ppr_top_edges_are_the_ppr_pruned_subgraph(tmp_path, top_nodes):
    from gsr_train.retrievers.ppr import ppr_keep

    index = toy_index(tmp_path, n_questions=5, n_entities=25, n_edges=70)
    split = index["test"]
    retriever = build("ppr", {"alpha": 0.2}, RetrievalInputs(index))
    assert isinstance(retriever, Retriever)
    scores, _ = retriever.score(split)
    # rank of an edge = PPR rank of its worse end, tie-break < 0.5: the edges above -n + 0.5 are
    # exactly those among the n highest-PPR entities of their question
    assert torch.equal(scores > -top_nodes + 0.5, ppr_keep(split, top_nodes, alpha=0.2))
    with pytest.raises(ValueError, match="unknown options"):
        build("ppr", {"alpah": 0.2}, RetrievalInputs(index))


@pytest.mark.parametrize("method,options", [("simgrag", {"k_node": 4}), ("safe", {"delta": 0, "k_qg": 2})])
def test_pattern_retrievers_match_by_question_id(tmp_path, method, options):
    data = tiny_dataset(tmp_path / "data")
    index = build_index(str(data), splits=["test"])
    enc = HashingEncoder(dim=32)
    emb = get_embeddings(index, enc, tmp_path / "c")
    split = index["test"]
    inputs = RetrievalInputs(index, emb.question["test"], emb, split, "test", enc, tmp_path / "c")
    retriever = build(method, {**options, "patterns": {"source": "gold", "max_chains": 3}}, inputs)
    full, extra = retriever.score(split)
    assert extra["search"]["questions"] == len(split) and extra["patterns"]["patterns"] > 0
    assert torch.isfinite(full).any()
    # the second question alone (a subset keeps its id): the same scores as in the full split
    part, _ = retriever.score(split.subset([1]))
    assert torch.equal(part, full[int(split.edge_ptr[1]) : int(split.edge_ptr[2])])
    # a split its patterns were not built for is refused by name
    other = split.subset([0])
    other.ids[0] = "not-a-question"
    with pytest.raises(ValueError, match="not in split 'test'"):
        retriever.score(other)
    with pytest.raises(ValueError, match="split's name"):
        build(method, options, RetrievalInputs(index, emb.question["test"], emb, split))
    with pytest.raises(ValueError, match="patterns.source"):
        build(method, {"patterns": {"source": "oracle"}}, inputs)


def test_a_broken_plugin_entry_point_is_named_only_when_asked_for(monkeypatch):
    """An installed plugin that cannot be imported (removed, or installed while this process runs)
    does not break the listing or any other retriever; asking for it names it and its entry point."""
    from importlib.metadata import EntryPoint

    from gsr_train import plugins
    from gsr_train.retrievers import registry

    ep = EntryPoint(name="broken-one", value="no_such_pkg.mod:Thing", group=registry.REGISTRY.group)

    def fake(group, name=None):
        return [e for e in [ep] if group == registry.REGISTRY.group and name in (None, e.name)]

    monkeypatch.setattr(plugins, "entry_points", fake)
    assert "broken-one" in registry.names() and "cosine" in registry.names()
    assert registry.trainable("cosine") is None
    with pytest.raises(registry.RetrieverError, match=r"'broken-one'.*no_such_pkg.mod:Thing cannot be loaded"):
        registry.trainable("broken-one")
