"""Runner for the structure-free cosine baseline: the bar every trained retriever must clear."""

from __future__ import annotations

from omegaconf import DictConfig

from gsr_train.config import as_dict
from gsr_train.runs.common import cache_dir, label_path, load_kg_index, output_dir, preflight, save_metrics


def run(cfg: DictConfig) -> dict:
    """Open the data through the runs' shared path (its options and checks), score the split,
    write the top-``top_k`` results and metrics.json (the recall at K = ``top_k`` among them)."""
    from gsr_train.eval.results import write_results
    from gsr_train.eval.tail import results_file, retrieval_row
    from gsr_train.retrievers.cosine import cosine_report

    split = cfg.get("split", "test")
    preflight(cfg, splits=[split], label_splits=[split], encoder=cfg.encoder)
    k = int(cfg.get("top_k", 500))
    index = load_kg_index(cfg, evaluate=[split])
    scores, report, figures = cosine_report(
        index,
        split,
        as_dict(cfg.encoder),
        cache_dir(cfg),
        cfg.get("cosine_mode", "parts"),
        [*cfg.eval_ks, k],
        label_path(cfg, split),
    )
    results_path = results_file(output_dir(cfg), split)
    write_results(results_path, index, split, scores, k)
    figures = {**figures, "data": str(cfg.data.name), "k": k, "results_path": str(results_path)}
    save_metrics(cfg, index.key, [retrieval_row(figures["method"], report, split, k, results=results_path)], figures)
    print(
        report.table(
            f"{figures['method']} ({figures['encoder']['encoder']}) on {cfg.data.name} [{split}]", breakdowns=True
        )
    )
    return figures
