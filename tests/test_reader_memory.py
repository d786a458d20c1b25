"""The reader's resident memory stays flat from training step to step, with batches of varying
width, even after a retriever earlier in the same process told glibc to keep freed memory
(what made a 135M-parameter reader climb from 9 to 21 GB). Runs in a subprocess: malloc
settings are per process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader
    from transformers import LlamaConfig, LlamaForCausalLM
    from gsr_train.memory import keep_freed_memory
    from gsr_train.readers.model import ReaderModule

    keep_freed_memory()  # as SubgraphRAG retrieval leaves the process before the reader trains
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = LlamaConfig(vocab_size=4000, hidden_size=384, intermediate_size=1536, num_hidden_layers=3,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024,
                      tie_word_embeddings=False)
    g = torch.Generator().manual_seed(0)
    widths = torch.randint(128, 513, (int(sys.argv[1]),), generator=g).tolist()

    def batch(width):
        ids = torch.randint(10, 3990, (8, width), generator=g)
        labels = ids.clone()
        labels[:, : width * 3 // 4] = -100
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
                "answer_window": torch.tensor(width - width * 3 // 4)}

    batches = [batch(w) for w in widths]
    module = ReaderModule(LlamaForCausalLM(cfg), lr=1e-4, log_every=0)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, DataLoader(batches, batch_size=None))
    print("RESULT", json.dumps(module.step_rss_mb))
""")


@pytest.mark.slow
def test_reader_rss_does_not_climb_with_varying_batch_widths():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, "20"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert done.returncode == 0 and line, done.stderr[-3000:]
    rss = json.loads(line[len("RESULT ") :])
    assert len(rss) == 20
    settled = rss[4]
    # freed activations go back to the OS: after the first steps the level holds (measured: flat
    # within 15 MB; with glibc keeping freed blocks, 1,126 MB at step 5 became 1,284 MB at step 9,
    # the first batch wider than all before it)
    assert max(rss[5:]) - settled < 48, rss
    assert abs(rss[-1] - settled) < 32, rss
