"""The shared progress helper: same batches with or without a bar, bar only when worth it,
periodic log lines with an ETA when there is no terminal (cluster jobs)."""

import logging
import sys

import gsr_train.progress as progress_module
from gsr_train.progress import batches, progress


def test_batches_cover_the_range_with_and_without_a_bar():
    for show in (False, True, None):
        assert list(batches(10, 4, show, "x")) == [(0, 4), (4, 8), (8, 10)]
    assert list(batches(0, 4, True, "x")) == []


def test_progress_is_silent_below_the_threshold(capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with progress(5, "quiet", threshold=10) as advance:
        advance(5)
    assert "quiet" not in capsys.readouterr().out
    with progress(5, "loud", show=True) as advance:
        advance(5)
    assert "loud" in capsys.readouterr().out


def test_without_a_terminal_progress_is_logged_with_an_eta(caplog, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setattr(progress_module, "LOG_EVERY_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger="gsr_train.progress"):
        with progress(400, "entity texts", show=True, done=100) as advance:
            advance(100)
            advance(200)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("entity texts: 200/400 (50.0%)") and "ETA" in lines[0]
    assert lines[-1].startswith("entity texts: 400/400 (100.0%)") and "ETA 0:00:00" in lines[-1]


def test_supervision_and_gsr_decoding_report_progress_in_log_files(caplog, monkeypatch, tmp_path):
    """Long shortest-path supervision and GSR decoding log done / total lines without a terminal."""
    import torch

    import gsr_train.kg.paths as paths
    import gsr_train.models.gsr.decoding as decoding
    from gsr_train.kg.paths import build_supervision
    from gsr_train.models.gsr.decoding import beam_chains
    from gsr_train.models.gsr.modeling import build_gsr_model
    from gsr_train.models.gsr.options import DecodeConfig
    from tests.robustness_helpers import toy_index

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setattr(progress_module, "LOG_EVERY_SECONDS", 0.0)
    monkeypatch.setattr(paths, "PROGRESS_THRESHOLD", 0)
    monkeypatch.setattr(decoding, "DECODE_PROGRESS_THRESHOLD", 0)
    split = toy_index(tmp_path, n_questions=6, n_entities=20, n_edges=40)["test"]
    with caplog.at_level(logging.INFO, logger="gsr_train.progress"):
        build_supervision(split, chunk_states=40)  # several chunks
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("supervision (shortest paths)")]
    assert lines and lines[-1].startswith("supervision (shortest paths): 6/6 (100.0%)")
    caplog.clear()
    torch.manual_seed(0)
    gsr = build_gsr_model(
        {
            "family": "t5",
            "name": "t",
            "tokenizer": "minilm",
            "relation_init": "random",
            "config": {"d_model": 16, "d_ff": 32, "num_layers": 1, "num_decoder_layers": 1, "num_heads": 2, "d_kv": 8},
        },
        ["a.b.c", "d.e.f"],
    )
    with caplog.at_level(logging.INFO, logger="gsr_train.progress"):
        beam_chains(gsr, ["q one", "q two", "q three"], DecodeConfig(beams=2, top_n=1, max_hops=1, batch_size=2))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("GSR decoding")]
    assert [x.split(" (")[0] for x in lines] == ["GSR decoding: 2/3", "GSR decoding: 3/3"]
