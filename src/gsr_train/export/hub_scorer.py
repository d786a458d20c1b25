"""The SubgraphRAG triple scorer as a Hugging Face Hub model (``config.json`` + ``model.safetensors``).

``SubgraphRAGScorer`` is a `TripleScorer` with ``huggingface_hub``'s
``PyTorchModelHubMixin``: ``save_pretrained(folder)`` writes the architecture (``scorer``:
the `ScorerConfig` fields) and what the weights must meet again (``meta``: encoder
name, embedding size, vocabulary hashes) to ``config.json`` and the weights (including the
learned no-text entity embedding) to ``model.safetensors``;
``SubgraphRAGScorer.from_pretrained(folder_or_repo_id)`` rebuilds it in one call. It is a
``TripleScorer``, so ``SubgraphRAGRetriever(scorer)`` uses it directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from huggingface_hub import PyTorchModelHubMixin

from gsr_train.models.subgraphrag.scorer import ScorerConfig, TripleScorer


class SubgraphRAGScorer(
    TripleScorer,
    PyTorchModelHubMixin,
    library_name="gsr-train",
    tags=["knowledge-graph", "kgqa", "retrieval", "subgraphrag"],
):
    def __init__(self, scorer: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> None:
        super().__init__(ScorerConfig(**dict(scorer)))
        self.meta = dict(meta or {})

    @classmethod
    def from_scorer(cls, scorer: TripleScorer, meta: Mapping[str, Any] | None = None) -> SubgraphRAGScorer:
        """A hub-ready copy of a trained scorer (same weights)."""
        out = cls(scorer=scorer.config.to_dict(), meta=meta)
        out.load_state_dict(scorer.state_dict(), strict=True)
        return out.eval()
