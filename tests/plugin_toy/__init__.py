"""A retriever outside gsr_train, for the plugin tests: joins by import path, no registration."""

from __future__ import annotations

import torch


class TopicEdges:
    """Edges touching a topic entity first (``weight``), then the rest: a few lines, one Protocol."""

    name = "topic-edges"

    def __init__(self, inputs, weight: float = 1.0) -> None:
        if weight <= 0:
            raise ValueError(f"weight must be positive, got {weight}")
        self.weight = float(weight)

    def score(self, split):
        heads, tails = split.edge_index
        base = torch.repeat_interleave(split.ent_ptr[:-1], split.edge_ptr.diff())
        topic = split.topic_mask[base + heads] | split.topic_mask[base + tails]
        return topic.float() * self.weight, {"topic_edges": int(topic.sum())}
