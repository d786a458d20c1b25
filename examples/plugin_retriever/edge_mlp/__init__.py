"""edge-mlp: a gsr-train retriever that lives outside gsr-train (see scorer.py)."""

from edge_mlp.scorer import EdgeMLP

__all__ = ["EdgeMLP"]
