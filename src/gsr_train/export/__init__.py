"""Hugging Face exports of trained models (folder + model card) and publishing to the Hub.

``export_model(run_or_ckpt, out)`` -> Hub-ready folder; ``publish(out, repo_id, dry_run=...)``
uploads it; ``SubgraphRAGScorer.from_pretrained(folder)`` loads an exported SubgraphRAG scorer.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["EXPORTERS", "SubgraphRAGScorer", "build_card", "detect_kind", "export_model", "publish"]
_HOMES = {
    "SubgraphRAGScorer": "hub_scorer",
    "EXPORTERS": "exporters",
    "detect_kind": "exporters",
    "export_model": "exporters",
    "build_card": "card",
    "publish": "publish",
}


def __getattr__(name: str) -> Any:  # light: torch / transformers load only when an export is made
    if name not in _HOMES:
        raise AttributeError(name)
    return getattr(importlib.import_module(f"gsr_train.export.{_HOMES[name]}"), name)
