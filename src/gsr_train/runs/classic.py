"""Runner for the classic retrievers (``+experiment=classic_triplets|classic_paths|classic_pcst``).

Scores the evaluation split with :func:`gsr_train.retrievers.classic.classic_scores`, writes the
top-``top_k`` triples per question in the common results format (``results_<split>.jsonl``),
prints the recall table (shortest-path, labelled and answer recall at ``eval_ks``, by hops)
and writes the figures to ``metrics.json`` (:mod:`gsr_train.eval.tail`) in the run folder.
"""

from __future__ import annotations

import time

from omegaconf import DictConfig

from gsr_train.config import as_dict


def run(cfg: DictConfig) -> dict:
    from gsr_train.arrays import segment_count
    from gsr_train.eval.labels import load_labelled_triples
    from gsr_train.eval.results import write_results
    from gsr_train.eval.retrieval import retrieval_metrics
    from gsr_train.eval.tail import results_file, retrieval_row
    from gsr_train.kg.paths import get_supervision
    from gsr_train.retrievers.classic import classic_scores, merge_options
    from gsr_train.runs.common import cache_dir, label_path, load_kg_index, output_dir, save_metrics
    from gsr_train.text.embeddings import get_embeddings

    split = cfg.get("split", "test")
    options = as_dict(cfg.classic)
    method = options.pop("method")
    t0 = time.perf_counter()
    index = load_kg_index(cfg, evaluate=[split])
    emb = get_embeddings(index, as_dict(cfg.encoder), cache_dir(cfg), splits=[split])
    graphs = index[split]
    prep = time.perf_counter() - t0
    t0 = time.perf_counter()
    scores = classic_scores(graphs, emb.question[split], emb, method, options)
    scoring = time.perf_counter() - t0
    sup = get_supervision(index, split, cache_dir(cfg))
    labelled = labelled_q = stats = None
    labels = label_path(cfg, split)
    if labels:
        labelled, labelled_q, stats = load_labelled_triples(labels, index, split)
    report = retrieval_metrics(
        graphs,
        scores,
        list(cfg.eval_ks),
        sp_label=sup.triple_label,
        labelled=labelled,
        labelled_questions=labelled_q,
        hops=sup.hops,
    )
    path = results_file(output_dir(cfg), split)
    write_results(path, index, split, scores, int(cfg.get("top_k", 500)))
    per_q = segment_count((scores > float("-inf")).view(-1), graphs.edge_ptr)
    print(report.table(f"classic-{method} on {cfg.data.name} [{split}]", breakdowns=True))
    figures = {
        "experiment": cfg.get("experiment_name"),
        "method": f"classic-{method}",
        "data": cfg.data.name,
        "split": split,
        "options": merge_options(options),
        "questions": len(graphs),
        "mean_retrieved_triples": float(per_q.double().mean()) if len(graphs) else 0.0,
        "labels": stats,
        "metrics": report.to_dict(),
        "results_path": str(path),
        "timings": {"prep_s": round(prep, 3), "scoring_s": round(scoring, 3)},
    }
    save_metrics(
        cfg,
        index.key,
        [retrieval_row(f"classic-{method}", report, split, int(cfg.get("top_k", 500)), results=path)],
        figures,
    )
    return figures
