"""Query-graph patterns and the pattern-matching retrievers built on them (SimGRAG, SAFE).

A `gsr_train.patterns.pattern.Pattern` is a small graph whose nodes are known
(entity text) or UNKNOWN (optionally typed) and whose relations are known or unknown.
Patterns come from an LLM (``patterns.llm``), from GSR chains or gold chains
(``patterns.sources``); ``patterns.search`` finds the top-k KG subgraphs matching one.
"""

from gsr_train.patterns.pattern import Pattern, PatternEdge, PatternNode, path_pattern

__all__ = ["Pattern", "PatternEdge", "PatternNode", "path_pattern"]
