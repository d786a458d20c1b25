"""The three LLM data steps: chain selection, pseudo questions, relevance labels."""
