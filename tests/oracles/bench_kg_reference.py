"""``bench/bench_sparql.py``'s first KG writer, kept as the reference its numpy writer must match byte for
byte (the same KG, hence the figures measured with it at 20M, from the same seed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_kg_reference(path: Path, triples: int, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    entities = max(triples // 6, 10)
    heads = (rng.zipf(1.6, triples) - 1) % entities
    tails = rng.integers(0, entities, triples)
    rels = rng.integers(0, 200, triples)
    rows = np.unique(np.stack([heads, rels, tails], axis=1), axis=0)
    keys = sorted((f"http://ex.org/e{h}", f"http://ex.org/r{r}", f"http://ex.org/e{t}") for h, r, t in rows.tolist())
    with open(path, "w") as f:
        f.writelines(f"<{h}> <{r}> <{t}> .\n" for h, r, t in keys)
    return len(keys)
