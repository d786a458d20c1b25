"""Hugging Face exports of trained models (folder + model card) and publishing to the Hub.

``export_model(run_or_ckpt, out)`` -> Hub-ready folder; ``publish(out, repo_id, dry_run=...)``
uploads it; ``SubgraphRAGScorer.from_pretrained(folder)`` loads an exported SubgraphRAG scorer.
"""

from __future__ import annotations

from typing import Any

from gsr_train.export import exporters
from gsr_train.export.card import build_card
from gsr_train.export.hub_scorer import SubgraphRAGScorer
from gsr_train.export.publish import publish

__all__ = ["EXPORTERS", "SubgraphRAGScorer", "build_card", "detect_kind", "export_model", "publish"]


def __getattr__(name: str) -> Any:  # light imports: torch / transformers load only when used
    if name == "SubgraphRAGScorer":
        return SubgraphRAGScorer
    if name in ("EXPORTERS", "detect_kind", "export_model"):
        return getattr(exporters, name)
    if name == "build_card":
        return build_card
    if name == "publish":
        return publish
    raise AttributeError(name)
