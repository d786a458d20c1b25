"""SubgraphRAG retriever: DDE + triple MLP (see :mod:`.scorer` for the two scoring passes)."""
from gsr_train.models.subgraphrag.batch import TripleBatch, make_batch
from gsr_train.models.subgraphrag.dde import DDE, NodeFeatures, dde, node_features, structure_features
from gsr_train.models.subgraphrag.scorer import Projections, ScorerConfig, TripleScorer

__all__ = ["DDE", "NodeFeatures", "Projections", "ScorerConfig", "TripleBatch", "TripleScorer", "dde", "make_batch",
           "node_features", "structure_features"]
