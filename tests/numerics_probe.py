"""Run by tests/test_numerics.py in a fresh process, under the instruction-set variables it is given.

Prints one JSON object: the SHA-256 of what each path computes with 1 and with 2 threads (or
workers), and the process's torch CPU capability and numerics record:

* ``embed``: MiniLM embedding tables built with 1 and 2 workers (``embed_texts``);
* ``encode``: MiniLM's ``encode`` called directly under 1 and 2 torch threads;
* ``train``: three AdamW steps of SubgraphRAG's training computation (a projection of frozen text
  vectors, the per-triple MLP op, a mean BCE loss) under 1 and 2 torch threads: the parameters;
* ``control``: the sum of 3M floats under 1 and 2 torch threads, which torch splits by thread
  (the negative control: the comparison must see this one differ).

    python tests/numerics_probe.py CACHE_DIR
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

from gsr_train.models.subgraphrag.triple_mlp import triple_mlp
from gsr_train.numerics import numerics_record
from gsr_train.text.embeddings import embed_texts
from gsr_train.text.encoders import load_encoder

TEXTS = [f"people person place of birth {i} " * (1 + i % 4) for i in range(96)]


def sha(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def train(threads: int) -> str:
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    text = torch.randn(600, 384)
    proj = torch.nn.Linear(384, 128)
    b = torch.nn.Parameter(torch.randn(40, 128) * 0.1)
    w = torch.nn.Parameter(torch.randn(128) * 0.1)
    bias = torch.nn.Parameter(torch.zeros(1))
    a_idx = torch.randint(0, 600, (6000, 2))
    b_idx = torch.randint(0, 40, (6000, 3))
    labels = (torch.rand(6000) < 0.1).float()
    params = [*proj.parameters(), b, w, bias]
    opt = torch.optim.AdamW(params, lr=1e-2)
    for _ in range(3):
        logits = triple_mlp(proj(text), a_idx, b, b_idx, w, bias)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return sha(*params)


def control(threads: int) -> str:
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    return sha(torch.randn(3_000_001).sum())


def main(cache: Path) -> None:
    encoder = load_encoder({"name": "minilm", "batch_size": 16, "max_length": 32})
    out: dict = {"record": numerics_record()}
    out["embed"] = [sha(embed_texts(TEXTS, encoder, cache / f"w{n}", chunk_rows=32, workers=n)) for n in (1, 2)]
    encoded = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        encoded.append(sha(encoder.encode(TEXTS)))
    out["encode"] = encoded
    out["train"] = [train(1), train(2)]
    out["control"] = [control(1), control(2)]
    print(json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
