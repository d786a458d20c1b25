"""Lightning DataModules and the example builders that feed the models: SubgraphRAG triple batches,
GSR indexing / retrieval examples (above the models they batch for, below the retrievers)."""
