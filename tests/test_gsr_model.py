"""Tiny GSR models: overfitting a handful of chains, constrained decoding, checkpoint reload."""

from __future__ import annotations

import gzip
import json

import pytest
import torch

from gsr_train.datamodules.gsr_data import GSRCollator, GSRDataModule, Seq2SeqItem
from gsr_train.features.relation_tokens import RETRIEVAL_PREFIX
from gsr_train.kg.execution import ChainExecutor
from gsr_train.kg.index import build_index
from gsr_train.models.gsr.decoding import KGConstraint, beam_chains
from gsr_train.models.gsr.modeling import GSRModel, build_gsr_model, load_gsr
from gsr_train.models.gsr.module import GSRModule
from gsr_train.models.gsr.options import DecodeConfig

RELS = [
    "people.person.spouse_s",
    "people.marriage.spouse",
    "film.actor.film",
    "film.performance.film",
    "location.country.capital",
    "people.person.nationality",
    "music.artist.genre",
    "sports.team.coach",
]
DATA = [  # question, chain (relation indices)
    ("who is anna married to", (0, 1)),
    ("what films did bob act in", (2, 3)),
    ("what is the capital of france", (4,)),
    ("where is carl from", (5,)),
    ("what genre does dora play", (6,)),
    ("who coaches the eagles", (7,)),
]
TINY = {
    "family": "t5",
    "config": {
        "d_model": 32,
        "d_ff": 64,
        "num_layers": 2,
        "num_decoder_layers": 2,
        "num_heads": 2,
        "d_kv": 16,
        "dropout_rate": 0.0,
    },
    "init_seed": 0,
}


pytestmark = pytest.mark.usefixtures("one_thread")


def items():
    return [
        Seq2SeqItem(RETRIEVAL_PREFIX, q, [c], [tuple(RELS[k] for k in c)], f"q{i}") for i, (q, c) in enumerate(DATA)
    ]


@pytest.fixture(scope="module")
def trained():
    return train_tiny()


def train_tiny() -> tuple[GSRModel, float]:
    """The tiny T5 trained on :data:`DATA` (120 full-batch steps) and its last loss."""
    torch.manual_seed(0)
    gsr = build_gsr_model(TINY, RELS)
    module = GSRModule(gsr, optim={"lr": 1e-2, "schedule": "constant", "weight_decay": 0.0})
    opt = torch.optim.AdamW([p for p in gsr.parameters() if p.requires_grad], lr=1e-2)
    batch = GSRCollator(gsr)(items())
    gsr.train()
    for _ in range(120):
        loss = module.loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    gsr.eval()
    return gsr, float(loss.detach())


def test_overfits_a_handful_of_chains(trained):
    gsr, loss = trained
    assert loss < 0.05
    beams = beam_chains(gsr, [q for q, _ in DATA], DecodeConfig(beams=4, top_n=1, max_hops=2))
    assert [b[0].chain for b in beams] == [c for _, c in DATA]
    assert all(b[0].score > b[1].score for b in beams)  # ranked, best first


def test_training_and_decoding_keep_freed_memory_for_the_next_step(trained, monkeypatch, malloc_requests):
    """Each step's logits over the vocabulary (and their log-softmax, their gradients, the beams'
    scores) are tens of MB, over glibc's mmap threshold: training and decoding ask glibc to keep
    freed blocks for reuse instead of mapping and page-faulting them in afresh every step."""
    import gsr_train.memory as memory

    gsr, _ = trained
    GSRModule(gsr).on_train_start()
    assert memory._policy == "keep" and malloc_requests[-1][memory._M_MMAP_THRESHOLD] == 1 << 27
    monkeypatch.setattr(memory, "_policy", "return")  # a reader trained in between
    beam_chains(gsr, [DATA[0][0]], DecodeConfig(beams=2, top_n=1, max_hops=1))
    assert memory._policy == "keep" and len(malloc_requests) == 2


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    return write_graphs(tmp_path_factory.mktemp("kg"))


def write_graphs(folder):
    """q0: from Anna only film relations exist, so the learned (spouse_s, spouse) is not executable."""
    rows = [
        {
            "id": "q0",
            "question": DATA[0][0],
            "answer": ["F"],
            "q_entity": ["Anna"],
            "a_entity": ["F"],
            "graph": [["Anna", RELS[2], "m.1"], ["m.1", RELS[3], "F"], ["G", RELS[6], "Anna"]],
            "choices": [],
        },
        {
            "id": "q1",
            "question": DATA[2][0],
            "answer": ["Paris"],
            "q_entity": ["France"],
            "a_entity": ["Paris"],
            "graph": [["France", RELS[4], "Paris"], ["Paris", RELS[5], "Bob"]],
            "choices": [],
        },
    ]
    with gzip.open(folder / "test.jsonl.gz", "wt") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return build_index(folder, splits=("test",))


def test_constrained_decoding_never_emits_a_non_executable_chain(trained, graphs):
    gsr, _ = trained
    split = graphs["test"]
    ex = ChainExecutor(split)
    constraint = KGConstraint(gsr, ex, graphs.relations, [0, 1])
    questions = [DATA[0][0], DATA[2][0]]
    free = beam_chains(gsr, questions, DecodeConfig(beams=5, max_hops=2))
    assert not ex.is_valid(0, constraint.to_kg(free[0][0].chain) or (-1,))  # the model's favourite is invalid
    for model in (gsr, build_gsr_model(TINY, RELS).eval()):  # trained and untrained
        constraint = KGConstraint(model, ex, graphs.relations, [0, 1])
        beams = beam_chains(model, questions, DecodeConfig(beams=5, max_hops=2, constrained=True), constraint)
        for q, per_q in enumerate(beams):
            assert per_q, "constrained decoding returned nothing"
            for b in per_q:
                kg = constraint.to_kg(b.chain)
                assert kg is not None and ex.is_valid(q, kg), (q, b)
    # the only executable 2-hop chain from Anna is (film.actor.film, film.performance.film)
    assert (2, 3) in [b.chain for b in beams[0]]


def test_shortest_constrained_beams_never_walk_back_to_the_topic(trained, graphs):
    """France -capital-> Paris -capital-> France is executable but not a shortest chain."""
    gsr, _ = trained
    ex = ChainExecutor(graphs["test"])
    cfg = DecodeConfig(beams=5, max_hops=2, constrained=True)
    loose = beam_chains(gsr, [DATA[2][0]], cfg, KGConstraint(gsr, ex, graphs.relations, [1]))
    assert (4, 4) in [b.chain for b in loose[0]]
    strict = beam_chains(gsr, [DATA[2][0]], cfg, KGConstraint(gsr, ex, graphs.relations, [1], shortest=True))
    chains = [b.chain for b in strict[0]]
    assert chains[0] == (4,) and (4, 4) not in chains and (4, 5) in chains


def test_checkpoint_reload_gives_identical_generations(tmp_path):
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    torch.manual_seed(0)
    gsr = build_gsr_model(TINY, RELS)
    data = GSRDataModule(gsr, items(), [], items(), schedule="retrieval", batch_size=3, eval_batch_size=6)
    module = GSRModule(gsr, optim={"lr": 5e-3}, val_decode={"beams": 3, "max_hops": 2})
    ckpt = ModelCheckpoint(dirpath=tmp_path, monitor="val/match@1", mode="max", save_top_k=1)
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=False,
        callbacks=[ckpt],
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        reload_dataloaders_every_n_epochs=1,
        deterministic=True,
    )
    trainer.fit(module, datamodule=data.as_lightning())
    assert ckpt.best_model_path
    best = torch.load(ckpt.best_model_path, map_location="cpu", weights_only=False)
    reference = GSRModel.from_checkpoint_state(best["gsr"])
    reference.load_state_dict({k[4:]: v for k, v in best["state_dict"].items()})
    cfg = DecodeConfig(beams=4, max_hops=2)
    questions = [q for q, _ in DATA]

    def gen(model):
        out = beam_chains(model.eval(), questions, cfg)
        return [[(b.chain, round(b.score, 5)) for b in per_q] for per_q in out]

    expected = gen(reference)
    assert gen(load_gsr(ckpt.best_model_path)) == expected
    reference.save_pretrained(tmp_path / "hf")
    assert gen(load_gsr(tmp_path / "hf")) == expected


def test_end_equivalent_match_counts_the_same_retrieval_under_another_name(trained, tmp_path):
    """Paris -nationality-> France stored as well: (capital,) and (nationality,) reach the same city."""
    from gsr_train.retrievers.gsr import GSRRetriever, evaluate

    gsr, _ = trained
    row = {
        "id": "q0",
        "question": DATA[2][0],
        "answer": ["Paris"],
        "q_entity": ["France"],
        "a_entity": ["Paris"],
        "graph": [["France", RELS[4], "Paris"], ["Paris", RELS[5], "France"], ["France", RELS[6], "Jazz"]],
        "choices": [],
    }
    with gzip.open(tmp_path / "test.jsonl.gz", "wt") as f:
        f.write(json.dumps(row) + "\n")
    index = build_index(tmp_path, splits=("test",))
    retriever = GSRRetriever(gsr, DecodeConfig(beams=3, top_n=1, max_hops=1, constrained=True))
    ground = [[(RELS[5],)]]  # the ground names the relation the model does not favour
    results = retriever.retrieve(["q0"], [DATA[2][0]], index["test"], [0], index.entities, index.relations, ground)
    beams = results[0].beams
    assert beams[0]["chain"] == [RELS[4]] and beams[0]["same_ends"]
    flags = {tuple(b["chain"]): b["same_ends"] for b in beams}
    assert flags[(RELS[5],)] and not flags[(RELS[6],)]  # the ground chain itself; Jazz is not Paris
    report = evaluate(results, ground, [None], top_n=1, ns=(1, 3))
    assert report.match["match@1"] == 0.0 and report.ends["end_match@1"] == 1.0
    assert report.flat()["end_match@1"] == 1.0 and report.to_dict()["end_match"]["questions"] == 1
    # without ground chains nothing is marked and no end match is reported
    plain = retriever.retrieve(["q0"], [DATA[2][0]], index["test"], [0], index.entities, index.relations)
    assert "same_ends" not in plain[0].beams[0] and not evaluate(plain, ground, [None], top_n=1).ends
