"""The fast GSR training path matches the reference one: length-grouped encoding gives the same
states, loss, gradients and decoded chains as one padded pass; validation decodes in full precision
under a bf16 trainer; the learning curve's intervals; early stopping."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from gsr_train.datamodules.gsr_data import GSRCollator, Seq2SeqItem
from gsr_train.features.relation_tokens import RETRIEVAL_PREFIX
from gsr_train.models.gsr import module as gsr_module
from gsr_train.models.gsr.decoding import beam_chains
from gsr_train.models.gsr.modeling import build_gsr_model
from gsr_train.models.gsr.module import (
    GSRModule,
    can_pack,
    cross_kv_modules,
    early_stopping,
    encode_grouped,
    encode_packed,
    match_figures,
    pack_rows,
)
from gsr_train.models.gsr.options import DecodeConfig

from .test_gsr_model import DATA, RELS, TINY

pytestmark = pytest.mark.usefixtures("one_thread")

# questions of very different lengths, so groups of 2 pad much less than the whole batch
LONG = [
    ("who is anna married to and since when did the wedding of the two of them take place", (0, 1)),
    ("films", (2, 3)),
    ("what is the capital of france the country in western europe", (4,)),
    ("carl", (5,)),
    ("what genre does dora play", (6,)),
    ("who coaches the eagles the team that plays in the american football league every season", (7,)),
]
MINILM_TINY = {
    "family": "minilm",
    "decoder": {"layers": 2, "heads": 2, "intermediate_size": 64, "dropout": 0.0, "max_positions": 8},
    "relation_head": "open",
    "max_source_length": 32,
}


def _items(data=LONG):
    return [
        Seq2SeqItem(RETRIEVAL_PREFIX, q, [c], [tuple(RELS[k] for k in c)], f"q{i}") for i, (q, c) in enumerate(data)
    ]


def _loss_and_grads(gsr, groups: int, pack: bool = False):
    module = GSRModule(gsr, length_groups=groups, pack=pack)
    batch = GSRCollator(gsr)(_items())
    gsr.zero_grad()
    loss = module.loss(batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in gsr.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads


@pytest.mark.parametrize("spec", [TINY, MINILM_TINY], ids=["t5", "minilm"])
def test_grouped_encoding_gives_the_states_loss_and_gradients_of_one_pass(spec):
    torch.manual_seed(0)
    gsr = build_gsr_model(spec, RELS).eval()  # eval: no dropout, so both ways compute the same function
    batch = GSRCollator(gsr)(_items())
    mask = batch["attention_mask"]
    assert len(set(mask.sum(1).tolist())) > 3  # lengths differ: the groups really pad less
    encoder = gsr.model.get_encoder()
    with torch.no_grad():
        whole = encoder(input_ids=batch["input_ids"], attention_mask=mask).last_hidden_state
        grouped = encode_grouped(encoder, batch["input_ids"], mask, group=2)
    assert grouped.shape == whole.shape
    real = mask.bool()
    torch.testing.assert_close(grouped[real], whole[real], atol=2e-5, rtol=1e-4)
    assert len(cross_kv_modules(gsr.model)) == 4  # keys + values of 2 decoder layers: shared per source
    loss0, grads0 = _loss_and_grads(gsr, 0)
    loss2, grads2 = _loss_and_grads(gsr, 2)
    assert math.isclose(loss0, loss2, rel_tol=1e-5)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in cross_kv_modules(gsr.model))  # removed
    assert grads0.keys() == grads2.keys() and grads0
    for name in grads0:
        torch.testing.assert_close(grads2[name], grads0[name], atol=1e-5, rtol=1e-3, msg=name)


def test_grouped_encoding_falls_back_to_one_pass_when_it_cannot_group():
    gsr = build_gsr_model(TINY, RELS).eval()
    batch = GSRCollator(gsr)(_items())
    calls = []
    encoder = gsr.model.get_encoder()

    def counting(**kw):
        calls.append(kw["input_ids"].shape)
        return encoder(**kw)

    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        encode_grouped(counting, ids, mask, group=0)
        encode_grouped(counting, ids, mask, group=len(ids))
        left = torch.flip(mask, [1])  # left padding: slicing to a group's longest would cut tokens
        encode_grouped(counting, torch.flip(ids, [1]), left, group=2)
        encode_grouped(counting, ids, mask, group=2)
    assert calls[:3] == [ids.shape] * 3
    assert len(calls) == 3 + 3 and all(c[0] == 2 and c[1] <= ids.shape[1] for c in calls[3:])
    assert sum(c[1] for c in calls[3:]) < 3 * ids.shape[1]  # the groups are padded to their own longest


def _train(groups: int, steps: int = 80):
    torch.manual_seed(0)
    gsr = build_gsr_model(TINY, RELS)  # dropout 0: both ways follow the same trajectory
    module = GSRModule(gsr, length_groups=groups)
    opt = torch.optim.AdamW([p for p in gsr.parameters() if p.requires_grad], lr=1e-2)
    batch = GSRCollator(gsr)(_items())
    gsr.train()
    for _ in range(steps):
        loss = module.loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    gsr.eval()
    beams = beam_chains(gsr, [q for q, _ in LONG], DecodeConfig(beams=4, top_n=3, max_hops=2))
    return float(loss.detach()), [[b.chain for b in per_q[:3]] for per_q in beams]


def test_training_the_grouped_way_decodes_the_chains_of_the_reference_way():
    loss_ref, chains_ref = _train(0)
    loss_fast, chains_fast = _train(4)
    assert loss_ref < 0.1 and math.isclose(loss_ref, loss_fast, rel_tol=0.05, abs_tol=1e-3)
    assert chains_fast == chains_ref
    assert [c[0] for c in chains_ref] == [c for _, c in LONG]


def test_bf16_autocast_loss_is_the_fp32_loss_to_bf16_rounding():
    torch.manual_seed(0)
    gsr = build_gsr_model(TINY, RELS).eval()
    module = GSRModule(gsr, length_groups=2)
    batch = GSRCollator(gsr)(_items())
    with torch.no_grad():
        full = float(module.loss(batch))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = float(module.loss(batch))
    assert math.isclose(full, half, rel_tol=3e-2)


def test_validation_decodes_in_full_precision_under_a_bf16_trainer(monkeypatch):
    gsr = build_gsr_model(TINY, RELS).eval()
    module = GSRModule(gsr, val_decode={"beams": 2, "max_hops": 2})
    seen = []

    def spy(*args, **kwargs):
        seen.append(torch.is_autocast_enabled("cpu"))
        return beam_chains(*args, **kwargs)

    monkeypatch.setattr(gsr_module, "beam_chains", spy)
    monkeypatch.setattr(module, "log", lambda *a, **k: None)
    batch = GSRCollator(gsr)(_items(DATA))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        module.validation_step(batch, 0)
    assert seen == [False] and len(module._match) == len(DATA)


def test_match_figures_carry_bootstrap_intervals():
    matches = {f"q{i}": (i % 2 == 0, i % 4 != 3) for i in range(200)}
    row = match_figures(matches, 3)
    assert row["match@1"] == 0.5 and row["match@3"] == 0.75
    for name in ("match@1", "match@3"):
        assert row[f"{name}_low"] < row[name] < row[f"{name}_high"]
        assert 0.05 < row[f"{name}_high"] - row[f"{name}_low"] < 0.2  # ~ +-1.96 sqrt(p(1-p)/200)
    assert match_figures(matches, 3) == row  # seeded: the same interval every time
    empty = match_figures({}, 3)  # no question: 0, never NaN (early stopping stops on a NaN monitor)
    assert set(empty) == set(row) and all(v == 0.0 for v in empty.values())


def test_early_stopping_follows_the_monitor():
    stop = early_stopping("val/match@1", 3)
    assert (stop.monitor, stop.patience, stop.mode) == ("val/match@1", 3, "max")
    assert early_stopping("val/loss", 2).mode == "min"
    with pytest.raises(ValueError, match="length_groups"):
        GSRModule(build_gsr_model(TINY, RELS), length_groups=-1)


def test_the_curve_travels_in_checkpoints_so_a_resumed_run_keeps_its_earlier_epochs():
    module = GSRModule(build_gsr_model(TINY, RELS))
    module.curve = [{"epoch": 0, "step": 3, "match@1": 0.5}, {"epoch": 1, "step": 6, "match@1": 0.6}]
    checkpoint: dict = {}
    module.on_save_checkpoint(checkpoint)
    resumed = GSRModule(build_gsr_model(TINY, RELS))
    resumed.on_load_checkpoint(checkpoint)
    assert resumed.curve == module.curve and resumed.curve is not module.curve
    resumed.on_load_checkpoint({})  # a checkpoint written before curves: an empty one
    assert resumed.curve == []


def test_pack_rows_places_every_source_once_without_overlap():
    lengths = [7, 3, 5, 2, 7, 1, 4]
    row, offset, rows = pack_rows(lengths, 7)
    assert rows == 5  # 29 tokens in rows of 7: 5 rows (the two 7s fill two alone)
    cells = [(r, o + j) for r, o, n in zip(row, offset, lengths) for j in range(n)]
    assert len(cells) == len(set(cells)) == sum(lengths)
    assert all(o + n <= 7 for o, n in zip(offset, lengths))


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_encoding_gives_the_states_loss_and_gradients_of_one_pass(attention):
    torch.manual_seed(0)
    gsr = build_gsr_model(MINILM_TINY, RELS).eval()
    encoder = gsr.model.get_encoder()
    encoder.config._attn_implementation = attention
    assert can_pack(encoder)
    batch = GSRCollator(gsr)(_items())
    mask = batch["attention_mask"]
    with torch.no_grad():
        whole = encoder(input_ids=batch["input_ids"], attention_mask=mask).last_hidden_state
        packed = encode_packed(encoder, batch["input_ids"], mask)
    assert packed.shape == whole.shape
    real = mask.bool()
    torch.testing.assert_close(packed[real], whole[real], atol=2e-5, rtol=1e-4)
    assert not packed[~real].any()  # zeros at the padding
    loss0, grads0 = _loss_and_grads(gsr, 0)
    loss_packed, grads_packed = _loss_and_grads(gsr, 0, pack=True)
    assert math.isclose(loss0, loss_packed, rel_tol=1e-5)
    assert grads0.keys() == grads_packed.keys() and grads0
    for name in grads0:
        torch.testing.assert_close(grads_packed[name], grads0[name], atol=1e-5, rtol=1e-3, msg=name)


def test_packing_runs_the_encoder_once_on_fewer_cells():
    gsr = build_gsr_model(MINILM_TINY, RELS).eval()
    batch = GSRCollator(gsr)(_items())
    shapes = []
    gsr.model.get_encoder().register_forward_pre_hook(
        lambda mod, args, kwargs: shapes.append(kwargs["input_ids"].shape), with_kwargs=True
    )
    with torch.no_grad():
        GSRModule(gsr, length_groups=2, pack=True).loss(batch)
    ((rows, width),) = shapes
    assert width == int(batch["attention_mask"].sum(1).max())
    assert rows * width < batch["input_ids"].numel()
    assert rows * width < 1.5 * int(batch["attention_mask"].sum())


def test_a_t5_encoder_is_not_packed_but_grouped():
    torch.manual_seed(0)
    gsr = build_gsr_model(TINY, RELS).eval()
    assert not can_pack(gsr.model.get_encoder())  # relative positions, no position_ids
    loss_grouped, _ = _loss_and_grads(gsr, 2)
    loss_packed, _ = _loss_and_grads(gsr, 2, pack=True)
    assert loss_grouped == loss_packed


def test_fused_adamw_makes_the_update_of_the_per_parameter_loop():
    torch.manual_seed(0)
    gsr = build_gsr_model({**MINILM_TINY, "freeze_encoder_embeddings": True}, RELS)  # as gsr_minilm
    GSRModule(gsr, pack=True).loss(GSRCollator(gsr)(_items())).backward()
    grads = {n: p.grad.clone() for n, p in gsr.named_parameters() if p.grad is not None}
    after = {}
    for fused in (False, True):  # the same gradients, three steps each way
        model = copy.deepcopy(gsr)
        opt = GSRModule(model, {"schedule": "constant"}, fused_adamw=fused).configure_optimizers()
        assert all(group["fused"] is fused for group in opt.param_groups)
        for _ in range(3):
            for name, p in model.named_parameters():
                p.grad = grads[name].clone() if name in grads else None
            opt.step()
        after[fused] = dict(model.named_parameters())
    assert [n for n, p in gsr.named_parameters() if not torch.equal(p, after[True][n])]  # it moved
    for name, p in after[False].items():
        torch.testing.assert_close(after[True][name], p, atol=1e-6, rtol=1e-5, msg=name)


def test_training_runs_without_the_nan_fill_and_restores_it():
    import torch.utils.deterministic as det

    from gsr_train.runs.gsr import _deterministic_fill

    before = det.fill_uninitialized_memory
    for fill in (False, True):
        with _deterministic_fill(fill):
            assert det.fill_uninitialized_memory is fill
        assert det.fill_uninitialized_memory is before
    with pytest.raises(RuntimeError), _deterministic_fill(not before):
        raise RuntimeError("a failed fit")
    assert det.fill_uninitialized_memory is before
