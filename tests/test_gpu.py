"""The GPU lane: every model's training step, scoring and serving on CUDA against the CPU.

``pytest -m gpu`` runs it where CUDA is visible (``bench/gpu_check.py`` runs it first); elsewhere
every test here is skipped with a reason (``tests/conftest.py``). Each test builds one model on the
CPU, copies it to CUDA and compares the two on the same inputs, with tolerances for float32 kernels
that sum in another order: SubgraphRAG, the GNN-RAG node scorer, a plugin ``EdgeScorerModule``
(examples/plugin_retriever), GSR decoding (unconstrained and constrained) and its packed training
step with fused AdamW, the 4-bit (QLoRA) reader's
training step and generation, and the retrieval metrics. A short ``trainer=gpu`` run of each
experiment family lives with the other end-to-end runs (``tests/test_experiments_e2e.py``).
"""

from __future__ import annotations

import copy
import sys

import pytest
import torch

from .conftest import GPU_LANE, REPO

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("one_thread")]

CUDA = torch.device(GPU_LANE)  # cuda; cpu in a dry run of the lane (GSR_GPU_LANE=cpu)


@pytest.fixture(autouse=True)
def exact_float32():
    """Parity is checked in full float32 (runs use TF32 on CUDA: ``float32_matmul_precision``)."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The SubgraphRAG toy data (hashing encoder) with its shortest-path supervision."""
    from gsr_train.kg.index import get_index
    from gsr_train.kg.paths import get_supervision
    from gsr_train.text.embeddings import get_embeddings

    from .subgraphrag_toy import write_toy

    root = tmp_path_factory.mktemp("gpu_toy")
    index = get_index(write_toy(root / "data"), cache_dir=root / "cache")
    emb = get_embeddings(index, {"name": "hashing", "dim": 32}, root / "cache")
    return index, emb, {s: get_supervision(index, s, root / "cache") for s in index.splits}


def _batch(module, index, emb, sup, split: str = "train", questions=range(8)):
    from gsr_train.features.structure import node_features
    from gsr_train.features.triple_batch import make_batch

    graphs = index[split]
    forward, reverse = module.dde_rounds
    feats = node_features(graphs, str(module.structure), int(forward), int(reverse))
    return make_batch(
        graphs,
        list(questions),
        feats,
        emb.question[split],
        emb.entity,
        emb.entity_has_text,
        emb.relation,
        sup[split].triple_label,
    )


def _step_parity(module, batch, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """One training step's loss and every gradient on the CPU and on CUDA, from the same weights."""
    gpu = copy.deepcopy(module).to(CUDA)
    losses = []
    for m, b in ((module, batch), (gpu, batch.to(CUDA))):
        m.train()
        m.zero_grad()
        torch.manual_seed(0)
        loss = m.training_step(b, 0)
        loss.backward()
        losses.append(float(loss.detach()))
    assert losses[1] == pytest.approx(losses[0], rel=rtol, abs=atol)
    grads = dict(module.named_parameters())
    for name, p in gpu.named_parameters():
        ref = grads[name].grad
        if ref is None:
            assert p.grad is None, name
            continue
        assert torch.allclose(p.grad.cpu(), ref, rtol=rtol * 10, atol=atol * 10), name


def _serve_parity(module, index, emb, split: str = "test") -> None:
    """The one serving path (scores; a node scorer's answers and evidence paths) on the CPU and on CUDA."""
    from gsr_train.retrievers.edge_scorer import serve

    graphs = index[split]
    cpu_scores, cpu_extra = serve(module.cpu().eval(), index, graphs, emb.question[split], emb, 4)
    gpu_scores, gpu_extra = serve(copy.deepcopy(module).to(CUDA).eval(), index, graphs, emb.question[split], emb, 4)
    finite = torch.isfinite(cpu_scores)
    assert torch.equal(finite, torch.isfinite(gpu_scores))
    assert torch.allclose(gpu_scores[finite], cpu_scores[finite], rtol=1e-4, atol=1e-4)
    assert gpu_scores.device.type == "cpu"  # results live with the split's CPU tables
    rows, gpu_rows = cpu_extra.get("row_fields"), gpu_extra.get("row_fields")
    assert (rows is None) == (gpu_rows is None)
    if rows is None:
        return
    clear = 0  # questions whose first answer is ahead of the second by more than float noise
    for q, (a, b) in enumerate(zip(rows["answers"], gpu_rows["answers"])):
        assert len(a) == len(b), q
        if a and (len(a) == 1 or a[0]["prob"] - a[1]["prob"] > 1e-3):
            clear += 1
            assert b[0]["name"] == a[0]["name"], q
            assert b[0]["prob"] == pytest.approx(a[0]["prob"], abs=2e-4), q
            if rows["paths"][q] and rows["paths"][q][0].endswith(a[0]["name"]):  # the first answer's path
                assert gpu_rows["paths"][q][0] == rows["paths"][q][0], q
    assert clear > 0


# ----------------------------------------------------------------------------- SubgraphRAG
def test_subgraphrag_training_step_matches_cpu(toy):
    from gsr_train.models.subgraphrag.module import SubgraphRAGModule

    index, emb, sup = toy
    torch.manual_seed(0)
    module = SubgraphRAGModule({"hidden": 32, "cos_features": True, "qr_product": True}, emb.dim)
    _step_parity(module, _batch(module, index, emb, sup))


def test_subgraphrag_scoring_and_serving_match_cpu(toy):
    from gsr_train.models.subgraphrag.scorer import ScorerConfig, TripleScorer
    from gsr_train.retrievers.subgraphrag import SubgraphRAGRetriever

    index, emb, _ = toy
    torch.manual_seed(3)
    scorer = TripleScorer(ScorerConfig.from_options({"hidden": 40, "cos_features": True}, emb.dim)).eval()
    with torch.no_grad():
        scorer.out.weight.normal_()
    split, questions = index["test"], emb.question["test"]
    on_cpu = SubgraphRAGRetriever(copy.deepcopy(scorer), "cpu")  # compiled kernels
    on_gpu = SubgraphRAGRetriever(copy.deepcopy(scorer), CUDA)  # the torch path on CUDA
    assert on_cpu.uses_compiled and (CUDA.type == "cpu" or not on_gpu.uses_compiled)
    a = on_cpu.score_split(split, questions, emb, graphs_per_batch=3)
    b = on_gpu.score_split(split, questions, emb, graphs_per_batch=3)
    assert a.std() > 0 and torch.allclose(b.cpu(), a, rtol=1e-4, atol=1e-4)
    one = on_gpu.score_question(split.graph(1), questions[1], emb)
    part = a[int(split.edge_ptr[1]) : int(split.edge_ptr[2])]
    assert torch.allclose(one.cpu(), part, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- GNN-RAG
GNN_VARIANTS = {
    "one GNN": {},
    # the shipped ensemble's evidence, ReaRev's passes, NSM's initialisation and supervision, the priors
    "ensemble and options": {
        "members": 2,
        "path_bonus": 0.5,
        "passes": 2,
        "relation_init": True,
        "similarity": True,
        "path_supervision": 0.5,
    },
}


@pytest.mark.parametrize("variant", GNN_VARIANTS)
def test_gnn_training_step_and_serving_match_cpu(toy, variant):
    from gsr_train.models.gnn_rag import GNNRAG

    index, emb, sup = toy
    torch.manual_seed(0)
    options = GNN_VARIANTS[variant]
    module = GNNRAG.create(dim=emb.dim, hidden=16, rounds=2, dropout=0.0, **options)  # devices draw other masks
    _step_parity(module, _batch(module, index, emb, sup))
    _serve_parity(module, index, emb)


# ----------------------------------------------------------------------------- a plugin scorer
def test_plugin_edge_scorer_training_step_and_serving_match_cpu(toy, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "examples" / "plugin_retriever"))
    sys.modules.pop("edge_mlp", None)
    from edge_mlp.scorer import EdgeMLP

    index, emb, sup = toy
    torch.manual_seed(0)
    module = EdgeMLP.create(dim=emb.dim, hidden=16)
    _step_parity(module, _batch(module, index, emb, sup))
    _serve_parity(module, index, emb)


def test_a_checkpoint_loads_onto_the_device_it_is_asked_for(toy, tmp_path):
    import pytorch_lightning as pl

    from gsr_train.models.edge_scorer import load_edge_scorer
    from gsr_train.models.gnn_rag import GNNRAG

    index, emb, sup = toy
    module = GNNRAG.create(dim=emb.dim, hidden=16, rounds=2)
    trainer = pl.Trainer(accelerator="cpu", max_epochs=0, logger=False, enable_progress_bar=False)
    trainer.strategy.connect(module)
    trainer.save_checkpoint(tmp_path / "m.ckpt")
    loaded = load_edge_scorer(tmp_path / "m.ckpt", map_location=CUDA)
    assert {p.device.type for p in loaded.parameters()} == {CUDA.type}


# ----------------------------------------------------------------------------- GSR decoding
def test_gsr_decoding_unconstrained_and_constrained_match_cpu(tmp_path):
    from gsr_train.kg.execution import ChainExecutor
    from gsr_train.models.gsr.decoding import KGConstraint, beam_chains
    from gsr_train.models.gsr.options import DecodeConfig

    from .test_gsr_model import DATA, train_tiny, write_graphs

    gsr, _ = train_tiny()
    index = write_graphs(tmp_path)
    questions = [q for q, _ in DATA]
    on_gpu = copy.deepcopy(gsr).to(CUDA)
    free = DecodeConfig(beams=4, top_n=3, max_hops=2)
    for cpu_beams, gpu_beams in zip(beam_chains(gsr, questions, free), beam_chains(on_gpu, questions, free)):
        _same_beams(cpu_beams, gpu_beams)
    ex = ChainExecutor(index["test"])
    pair = [DATA[0][0], DATA[2][0]]
    cfg = DecodeConfig(beams=5, max_hops=2, constrained=True)
    a = beam_chains(gsr, pair, cfg, KGConstraint(gsr, ex, index.relations, [0, 1]))
    b = beam_chains(on_gpu, pair, cfg, KGConstraint(on_gpu, ex, index.relations, [0, 1]))
    for cpu_beams, gpu_beams in zip(a, b):
        _same_beams(cpu_beams, gpu_beams)
    assert all(q for q in b)  # constrained decoding on CUDA returns executable chains, as on the CPU


def test_gsr_packed_training_step_matches_cpu():
    """The recipe's training step (questions packed end to end, block-diagonal attention; fused
    AdamW) on CUDA: the CPU's loss and gradients, and the packed states of one padded pass there."""
    from gsr_train.datamodules.gsr_data import GSRCollator
    from gsr_train.models.gsr.modeling import build_gsr_model
    from gsr_train.models.gsr.module import GSRModule, encode_packed

    from .test_gsr_fast import MINILM_TINY, _items
    from .test_gsr_model import RELS

    torch.manual_seed(0)
    gsr = build_gsr_model(MINILM_TINY, RELS).eval()
    on_gpu = copy.deepcopy(gsr).to(CUDA)
    batch = GSRCollator(gsr)(_items())

    def step(model, device):
        model.zero_grad()
        moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        loss = GSRModule(model, pack=True).loss(moved)
        loss.backward()
        return loss.detach().cpu(), {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}

    (loss_cpu, grads_cpu), (loss_gpu, grads_gpu) = step(gsr, "cpu"), step(on_gpu, CUDA)
    torch.testing.assert_close(loss_gpu, loss_cpu, atol=1e-5, rtol=1e-4)
    assert grads_gpu.keys() == grads_cpu.keys() and grads_cpu
    for name in grads_cpu:
        torch.testing.assert_close(grads_gpu[name], grads_cpu[name], atol=1e-4, rtol=1e-3, msg=name)
    ids, mask = batch["input_ids"].to(CUDA), batch["attention_mask"].to(CUDA)
    encoder = on_gpu.model.get_encoder()
    with torch.no_grad():
        whole = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        packed = encode_packed(encoder, ids, mask)
    torch.testing.assert_close(packed[mask.bool()], whole[mask.bool()], atol=1e-4, rtol=1e-4)
    optimiser = torch.optim.AdamW([p for p in on_gpu.parameters() if p.grad is not None], lr=1e-3, fused=True)
    before = {n: p.detach().clone() for n, p in on_gpu.named_parameters() if p.grad is not None}
    optimiser.step()  # the fused kernel runs on CUDA and moves every trained parameter
    assert all(not torch.equal(p.detach(), before[n]) for n, p in on_gpu.named_parameters() if n in before)


def _same_beams(cpu_beams, gpu_beams, tol: float = 1e-3) -> None:
    """The same scores in the same order, and the same chain wherever a score is not tied with a
    neighbour's (beams that tie within float noise may swap, or the last kept one may differ)."""
    assert len(gpu_beams) == len(cpu_beams)
    scores = [b.score for b in cpu_beams]
    assert [b.score for b in gpu_beams] == pytest.approx(scores, abs=tol)
    for i, (x, y) in enumerate(zip(cpu_beams, gpu_beams)):
        near = [j for j in (i - 1, i + 1) if 0 <= j < len(scores) and abs(scores[j] - scores[i]) < tol]
        if not near and i < len(scores) - 1:
            assert y.chain == x.chain, (i, [b.chain for b in cpu_beams], [b.chain for b in gpu_beams])


# ----------------------------------------------------------------------------- the 4-bit reader
@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    from .test_reader_helpers import tiny_llama_folder

    return tiny_llama_folder(tmp_path_factory.mktemp("llama") / "tiny")


def _reader_batch(tok, device):
    from gsr_train.readers.data import ReaderDataset, collate
    from gsr_train.readers.prompts import build_examples

    from .test_reader import QUESTIONS, TRIPLES

    results = {"q1": {"id": "q1", "triples": TRIPLES[:3]}, "q2": {"id": "q2", "triples": TRIPLES[3:5]}}
    exs = build_examples(QUESTIONS, results, "triples", 3, tok, 200)
    ds = ReaderDataset(tok, exs, 256)
    batch = collate([ds[0], ds[1]], tok.pad_token_id)
    return exs, {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}


def test_4bit_reader_trains_and_generates_on_cuda_like_on_cpu(tiny_llama):
    pytest.importorskip("bitsandbytes")
    from gsr_train.readers.generate import generate_local
    from gsr_train.readers.model import answer_loss, load_reader

    lora = {"r": 8, "alpha": 16, "dropout": 0.0}
    first = {}
    for label, device in (("cpu", "cpu"), ("lane", GPU_LANE)):
        torch.manual_seed(0)
        model, tok, _ = load_reader(str(tiny_llama), "4bit", lora=lora, gradient_checkpointing=False, device=device)
        lin = model.get_base_model().model.layers[0].self_attn.q_proj.base_layer
        assert type(lin).__name__ == "Linear4bit" and lin.weight.device.type == device  # placed as asked
        exs, batch = _reader_batch(tok, device)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        model.train()
        losses = []
        for _ in range(8):
            loss = answer_loss(model, batch["input_ids"], batch["attention_mask"], batch["labels"])
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(float(loss.detach()))
        first[label] = losses[0]
        # bf16 compute oscillates a little step to step: compare averages, not single steps
        assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.1, (device, losses)
        texts = generate_local(model, tok, exs, batch_size=2, max_new_tokens=4, progress=False)
        assert len(texts) == 2 and all(isinstance(t, str) for t in texts)
    # the same nf4 weights and LoRA init: the first loss agrees across devices (bf16 compute)
    assert first["lane"] == pytest.approx(first["cpu"], rel=0.05)


def test_fp32_reader_step_matches_cpu(tiny_llama):
    from gsr_train.readers.model import answer_loss, load_reader

    lora = {"r": 8, "alpha": 16, "dropout": 0.0}
    grads = {}
    for label, device in (("cpu", "cpu"), ("lane", GPU_LANE)):
        torch.manual_seed(0)
        model, tok, _ = load_reader(str(tiny_llama), "fp32", lora=lora, gradient_checkpointing=False, device=device)
        assert {p.device.type for p in model.parameters()} == {device}
        _, batch = _reader_batch(tok, device)
        loss = answer_loss(model, batch["input_ids"], batch["attention_mask"], batch["labels"])
        loss.backward()
        grads[label] = (float(loss), {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None})
    (cpu_loss, cpu_g), (gpu_loss, gpu_g) = grads["cpu"], grads["lane"]
    assert gpu_loss == pytest.approx(cpu_loss, rel=1e-4)
    assert cpu_g.keys() == gpu_g.keys() and cpu_g
    for n in cpu_g:
        assert torch.allclose(gpu_g[n], cpu_g[n], rtol=1e-3, atol=1e-5), n


# ----------------------------------------------------------------------------- metrics
def test_retrieval_metrics_on_cuda_match_cpu_per_question(webqsp_mini, tmp_path):
    from gsr_train.eval.retrieval import retrieval_metrics
    from gsr_train.kg.index import get_index
    from gsr_train.kg.paths import get_supervision

    index = get_index(webqsp_mini, cache_dir=tmp_path)
    for split in ("test", "train"):
        graphs = index[split]
        sup = get_supervision(index, split, tmp_path)
        g = torch.Generator().manual_seed(0)
        scores = (torch.rand(graphs.total_edges, generator=g) * 100).round() / 100  # ties, as real scores have
        ks = [10, 20, 50, 100, 200]
        a = retrieval_metrics(graphs, scores, ks, sup.triple_label, hops=sup.hops)
        b = retrieval_metrics(graphs, scores, ks, sup.triple_label, hops=sup.hops, device=CUDA)
        for m, per_k in a.overall.items():
            for k, v in per_k.items():
                assert b.overall[m][k] == pytest.approx(v, rel=1e-12, abs=1e-15), (split, m, k)
        for m, v in a.per_question.items():
            assert torch.equal(torch.isnan(v), torch.isnan(b.per_question[m]))
            assert torch.allclose(b.per_question[m], v, equal_nan=True), (split, m)


# ----------------------------------------------------------------------------- the local LLM server
def test_local_llm_backend_generates_on_cuda_what_it_generates_on_cpu(tiny_llama):
    from gsr_train.llm.local_model import TransformersBackend

    messages = [{"role": "user", "content": "what language is spoken in jamaica?"}]
    params = {"max_tokens": 6, "temperature": 0, "logprobs": True, "top_logprobs": 2}
    cpu = TransformersBackend.load(str(tiny_llama))
    lane = TransformersBackend.load(str(tiny_llama), device=str(CUDA))
    assert lane.model.device.type == CUDA.type
    prompts = [cpu.prompt_ids(messages, params)] * 2
    a, b = cpu.generate_batch(prompts, params), lane.generate_batch(prompts, params)
    assert [g.text for g in b] == [g.text for g in a] and b[0].completion_tokens == a[0].completion_tokens
    assert [t["logprob"] for t in b[0].logprobs] == pytest.approx([t["logprob"] for t in a[0].logprobs], abs=1e-3)


def test_a_cuda_step_draws_what_manual_seed_draws():
    from gsr_train.models.edge_scorer import seed_step

    torch.manual_seed(99)
    expected = (torch.rand(4, device=CUDA), torch.rand(4))
    torch.manual_seed(0)
    seed_step(99, CUDA)
    assert all(torch.equal(a, b) for a, b in zip(expected, (torch.rand(4, device=CUDA), torch.rand(4))))
