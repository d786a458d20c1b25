"""Runner for the structure-free cosine baseline: the bar every trained retriever must clear."""

from __future__ import annotations

from omegaconf import DictConfig

from gsr_train.options.preflight import preflight
from gsr_train.retrievers.cosine import cosine_split_scores
from gsr_train.runs.retrieval_report import report_retrieval
from gsr_train.runtime.run_data import cache_dir, encoder_options, load_kg_index


def run(cfg: DictConfig) -> dict:
    """Open the data through the runs' shared path (its options and checks), score the split and
    report it through the one retrieval path (`gsr_train.runs.retrieval_report.report_retrieval`:
    the top-``top_k`` results file, recall at ``top_k``, ``eval_ks`` and 10 / 20 / 50 / 100)."""
    split, mode = cfg.get("split", "test"), str(cfg.get("cosine_mode", "parts"))
    preflight(cfg, splits=[split], label_splits=[split], encoder=True)
    index = load_kg_index(cfg, evaluate=[split])
    timings: dict[str, float] = {}
    scores, enc, emb = cosine_split_scores(index, split, encoder_options(cfg), cache_dir(cfg), mode, timings=timings)
    details = {
        "experiment": cfg.get("experiment_name"),
        "encoder": enc.describe(),
        "relation_text": emb.meta["relation_text"],
        "data_fingerprint": index.key,
        "edges": int(index[split].edge_rel.numel()),
        "timings": {n: round(v, 3) for n, v in timings.items()},
    }
    return report_retrieval(cfg, index, split, f"cosine-{mode}", scores, details=details)
