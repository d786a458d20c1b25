"""The walk-through of docs/how-to/add-a-retriever.md, through the public interface only: a toy retriever is
registered, built by name, scored, written as a results file, evaluated, and run in the
robustness study next to the built-in ones."""

from __future__ import annotations

import json

import pytest
import torch

from gsr_train.eval.results import read_results, write_results
from gsr_train.eval.retrieval import retrieval_metrics
from gsr_train.kg.paths import build_supervision
from gsr_train.retrievers.interface import RetrievalInputs, Retriever, register
from gsr_train.retrievers.registry import build, names
from gsr_train.robustness.retrievers import build_retrievers
from gsr_train.robustness.run import evaluate_robustness
from gsr_train.text.embeddings import get_embeddings
from gsr_train.text.encoders import HashingEncoder
from tests.robustness_helpers import toy_index


class TopicEdges:
    """Toy method: edges touching a topic entity first (score 1), then every other edge (score 0)."""

    name = "topic-edges"

    def __init__(self, bonus: float = 1.0) -> None:
        self.bonus = float(bonus)

    def score(self, split):
        offsets = torch.repeat_interleave(split.ent_ptr[:-1], split.num_edges)
        heads = split.topic_mask[split.edge_index[0].long() + offsets]
        tails = split.topic_mask[split.edge_index[1].long() + offsets]
        return (heads | tails).float() * self.bonus, {"topic_edge_share": float((heads | tails).float().mean())}


@register("topic-edges")
def topic_edges(inputs: RetrievalInputs, **options) -> TopicEdges:
    return TopicEdges(**options)


@pytest.mark.slow
def test_a_new_retriever_plugs_into_results_metrics_and_robustness(tmp_path):
    index = toy_index(tmp_path, n_questions=6, n_entities=30, n_edges=80)
    split = index["test"]
    emb = get_embeddings(index, HashingEncoder(dim=16), tmp_path / "cache")
    inputs = RetrievalInputs(index, emb.question["test"], emb, split)
    assert "topic-edges" in names() and {"cosine", "subgraphrag", "gsr", "classic-pcst"} <= set(names())
    retriever = build("topic-edges", {"bonus": 2.0}, inputs)
    assert isinstance(retriever, Retriever)
    scores, extra = retriever.score(split)
    assert scores.shape == (int(split.edge_ptr[-1]),) and 0 < extra["topic_edge_share"] <= 1
    # one results file, the same metrics as any retriever
    path = tmp_path / "results.jsonl"
    write_results(path, index, "test", scores, k=5)
    back, _ = read_results(path, index, "test")
    sup = build_supervision(split)
    report = retrieval_metrics(split, back, [5], sp_label=sup.triple_label)
    assert report.overall["answer_recall"][5] is not None
    assert len(path.read_text().splitlines()) == len(split) and json.loads(path.read_text().splitlines()[0])["id"]
    # the robustness study takes it by name, next to a built-in one
    retrievers = build_retrievers(
        {"topic-edges": {"bonus": 1.0}, "cosine": {}}, index, split, emb.question["test"], emb
    )
    assert set(retrievers) == {"topic-edges", "cosine"}
    figures = evaluate_robustness(split, retrievers, sup.triple_label, ["delete"], [0.5], [5], seed=0)
    assert {r["retriever"] for r in figures["results"]} == {"topic-edges", "cosine"}


def test_reader_evidence_from_any_registered_retriever(tmp_path):
    import pytest

    from gsr_train.data.errors import PreflightError
    from gsr_train.kg.index import get_index
    from gsr_train.readers.evidence import evidence_source, registered_results_file
    from gsr_train.runs.reader import reader_recipe
    from gsr_train.runtime.run_data import run_place

    from .conftest import compose_config
    from .test_reader_run import _rows, _write

    data = tmp_path / "data"
    data.mkdir()
    _write(data, "train", _rows("tr", 5))
    base = [
        "+experiment=reader_webqsp_mini",
        f"paths.output_dir={tmp_path / 'run'}",
        f"data.dir={data}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "data.splits=[train]",
        "encoder.name=hashing",
        "+encoder.dim=16",
        "qa.retrieval.k=2",
    ]
    index = get_index(data, ("train",), tmp_path / "cache")
    cfg = compose_config([*base, "qa.retrieval.retriever=topic-edges", "qa.retrieval.options={bonus: 3.0}"])
    spec, place = reader_recipe(cfg).qa.retrieval, run_place(cfg)
    assert evidence_source(spec, place, "train").startswith("topic-edges retriever with hashing (top 2)")
    rows = [json.loads(x) for x in registered_results_file(spec, place, index, "train").read_text().splitlines()]
    assert len(rows) == 5 and all(len(r["triples"]) == 2 for r in rows)
    assert all(r["scores"][0] == 3.0 and r["triples"][0][0].startswith("Country") for r in rows)  # topic edges first
    with pytest.raises(PreflightError, match="qa.retrieval.retriever=nope: not a registered retriever"):
        unknown = reader_recipe(compose_config([*base, "qa.retrieval.retriever=nope"])).qa.retrieval
        registered_results_file(unknown, place, index, "train")
