"""SubgraphRAG retriever: DDE + triple MLP (see :mod:`.scorer` for the two scoring passes).
Its inputs (:class:`~gsr_train.features.triple_batch.TripleBatch`, DDE features) live in
:mod:`gsr_train.features`, shared with the datamodule. Nothing is imported here, so that the option
checks read :mod:`.options` without torch."""
