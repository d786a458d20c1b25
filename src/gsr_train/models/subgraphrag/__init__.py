"""SubgraphRAG retriever: DDE + triple MLP (see :mod:`.scorer` for the two scoring passes).

Its inputs (:class:`~gsr_train.features.triple_batch.TripleBatch`, DDE features) live in
:mod:`gsr_train.features`, shared with the datamodule."""

from gsr_train.models.subgraphrag.scorer import Projections, ScorerConfig, TripleScorer

__all__ = ["Projections", "ScorerConfig", "TripleScorer"]
