"""KG-RAG readers: one interface, the built-in readers, prompts, evidence, training and generation.

* :mod:`.interface`: the :class:`~.interface.Reader` shape (``prepare`` questions with their
  evidence, ``answer`` them; ``training`` + ``save`` when trainable), ``register``;
  :mod:`.registry` builds one by name, ``_target_`` or ``gsr_train.readers`` entry point;
* the built-in readers (:mod:`.registered`): :mod:`.causal_lm` (a local causal LM fine-tuned with
  LoRA / QLoRA / fully: :mod:`.model` loading and LightningModule, :mod:`.data` answer-only labels
  and batches, :mod:`.generate` batched greedy decoding), :mod:`.prompted` (any OpenAI-compatible
  endpoint through :class:`gsr_train.llm.client.ChatClient`) and :mod:`.retrieval_answers` (the
  evidence's top candidate);
* :mod:`.prompts`: the registered prompt formats (GSR paths / triple set, SubgraphRAG), token
  budget, answer parsing;
* :mod:`.evidence`: each split's questions and retrieved evidence (:mod:`.evidence_merge`: several
  retrievers' evidence in one prompt); :mod:`.scoring`: a reader's readings scored.

The pipeline (retrieve -> read -> score) is composed by :mod:`gsr_train.runs.reader`; metrics are
:mod:`gsr_train.eval.qa`.
"""
