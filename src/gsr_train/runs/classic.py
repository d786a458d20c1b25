"""Runner for the classic retrievers (``+experiment=classic_triplets|classic_paths|classic_pcst``).

Scores the evaluation split with `gsr_train.retrievers.classic.classic_scores` and reports it
through `gsr_train.runs.retrieval_report.report_retrieval`, which writes the
top-``top_k`` triples per question in the common results format (``results_<split>.jsonl``),
prints the recall table (shortest-path, labelled and answer recall at ``eval_ks``, by hops)
and writes the figures to ``metrics.json`` (`gsr_train.eval.tail`) in the run folder.
"""

from __future__ import annotations

import time

from omegaconf import DictConfig

from gsr_train.arrays import segment_count
from gsr_train.config import as_dict
from gsr_train.retrievers.classic import classic_scores, merge_options
from gsr_train.runs.retrieval_report import report_retrieval
from gsr_train.runtime.run_data import cache_dir, encoder_options, load_kg_index
from gsr_train.text.embeddings import get_embeddings


def run(cfg: DictConfig) -> dict:
    """Score the split with the classic method and report it through the one retrieval path
    (`gsr_train.runs.retrieval_report.report_retrieval`)."""
    split = cfg.get("split", "test")
    options = as_dict(cfg.classic)
    method = options.pop("method")
    t0 = time.perf_counter()
    index = load_kg_index(cfg, evaluate=[split])
    emb = get_embeddings(index, encoder_options(cfg), cache_dir(cfg), splits=[split])
    graphs = index[split]
    prep = time.perf_counter() - t0
    t0 = time.perf_counter()
    scores = classic_scores(graphs, emb.question[split], emb, method, options)
    scoring = time.perf_counter() - t0
    per_q = segment_count((scores > float("-inf")).view(-1), graphs.edge_ptr)
    details = {
        "experiment": cfg.get("experiment_name"),
        "options": merge_options(options),
        "mean_retrieved_triples": float(per_q.double().mean()) if len(graphs) else 0.0,
        "timings": {"prep_s": round(prep, 3), "scoring_s": round(scoring, 3)},
    }
    return report_retrieval(cfg, index, split, f"classic-{method}", scores, details=details)
