"""A gsr-train reader plugin: rank the evidence's candidate entities with a small trained scorer."""

from candidate_ranker.reader import CandidateRanker

__all__ = ["CandidateRanker"]
