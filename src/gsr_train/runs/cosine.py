"""Runner for the structure-free cosine baseline: the bar every trained retriever must clear."""

from __future__ import annotations

import time

from omegaconf import DictConfig

from gsr_train.config import as_dict
from gsr_train.runs.common import cache_dir, load_kg_index, preflight


def run(cfg: DictConfig) -> dict:
    """Open the data through the runs' shared path (its options and checks), score the split and
    report it through the one retrieval path (:func:`gsr_train.runs.retrieve.report_retrieval`:
    the top-``top_k`` results file, recall at ``top_k``, ``eval_ks`` and 10 / 20 / 50 / 100)."""
    from gsr_train.retrievers.cosine import cosine_scores
    from gsr_train.runs.retrieve import report_retrieval
    from gsr_train.text.embeddings import get_embeddings
    from gsr_train.text.encoders import load_encoder

    split, mode = cfg.get("split", "test"), str(cfg.get("cosine_mode", "parts"))
    preflight(cfg, splits=[split], label_splits=[split], encoder=cfg.encoder)
    index = load_kg_index(cfg, evaluate=[split])
    encoder_cfg = as_dict(cfg.encoder)
    t0 = time.perf_counter()
    enc = load_encoder(encoder_cfg)
    emb = get_embeddings(index, enc, cache_dir(cfg), relation_text=encoder_cfg.get("relation_text") or "raw")
    embedded = time.perf_counter() - t0
    t0 = time.perf_counter()
    graphs = index[split]
    scores = cosine_scores(graphs, emb.question[split], emb, mode, index=index, encoder=enc, cache_dir=cache_dir(cfg))
    details = {
        "experiment": cfg.get("experiment_name"),
        "encoder": enc.describe(),
        "relation_text": emb.meta["relation_text"],
        "data_fingerprint": index.key,
        "edges": int(graphs.edge_rel.numel()),
        "timings": {"embeddings_s": round(embedded, 3), "scoring_s": round(time.perf_counter() - t0, 3)},
    }
    return report_retrieval(cfg, index, split, f"cosine-{mode}", scores, details=details)
