"""KG-RAG readers: prompts from retrieval results, (Q)LoRA fine-tuning, batched generation.

* :mod:`.prompts`: the three prompt formats (GSR paths / triple set, SubgraphRAG), token
  budget, answer parsing;
* :mod:`.data`: answer-only labels, left-padded batches;
* :mod:`.model`: loading in 4-bit / 8-bit / 16-bit / fp32 with LoRA or full fine-tuning, the
  LightningModule, adapter saving and merge-and-export;
* :mod:`.generate`: greedy batched decoding (local) and the prompting-only reader (any
  OpenAI-compatible endpoint through :class:`gsr_train.llm.client.ChatClient`).

The pipeline (retrieve -> read -> score) is :mod:`gsr_train.runs.reader`; metrics are
:mod:`gsr_train.eval.qa`.
"""
