"""Runner for the structure-free cosine baseline: the bar every trained retriever must clear."""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from gsr_train.runs.common import cache_dir, label_path, output_dir, preflight, resolve_data_dir, save_metrics


def run(cfg: DictConfig) -> dict:
    from gsr_train.retrievers.cosine import run_cosine

    split = cfg.get("split", "test")
    preflight(cfg, splits=[split], label_splits=[split], encoder=cfg.encoder)
    result = run_cosine(
        resolve_data_dir(cfg),
        split=split,
        encoder=OmegaConf.to_container(cfg.encoder, resolve=True),
        cache_dir=cache_dir(cfg),
        k=int(cfg.get("top_k", 500)),
        labels_path=label_path(cfg, split),
        out_dir=output_dir(cfg),
        mode=cfg.get("cosine_mode", "parts"),
        ks=list(cfg.eval_ks),
    )
    from gsr_train.eval.retrieval import RetrievalReport
    from gsr_train.eval.tail import retrieval_row

    report = RetrievalReport.from_dict(result["metrics"])
    row = retrieval_row(result["method"], report, split, int(result["k"]), results=result.get("results_path"))
    save_metrics(cfg, result["data_fingerprint"], [row], {**result, "data": cfg.data.name, "data_dir": result["data"]})
    return result
