"""SubgraphRAG retriever: DDE + triple MLP (see `.scorer` for the two scoring passes).
Its inputs (`gsr_train.features.triple_batch.TripleBatch`, DDE features) live in
`gsr_train.features`, shared with the datamodule. Nothing is imported here, so that the option
checks read `.options` without torch."""
