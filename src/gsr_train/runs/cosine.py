"""Runner for the structure-free cosine baseline: the bar every trained retriever must clear."""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from gsr_train.runs.common import cache_dir, label_path, output_dir, preflight, resolve_data_dir


def run(cfg: DictConfig) -> dict:
    from gsr_train.retrievers.cosine import run_cosine

    split = cfg.get("split", "test")
    preflight(cfg, splits=[split], label_splits=[split], encoder=cfg.encoder)
    return run_cosine(
        resolve_data_dir(cfg),
        split=split,
        encoder=OmegaConf.to_container(cfg.encoder, resolve=True),
        cache_dir=cache_dir(cfg),
        k=int(cfg.get("top_k", 500)),
        labels_path=label_path(cfg, split),
        out_dir=output_dir(cfg),  # results + metrics.json (the tail's header names the experiment)
        mode=cfg.get("cosine_mode", "parts"),
        ks=list(cfg.eval_ks),
        experiment=cfg.experiment_name,
        data_name=str(cfg.data.name),
    )
