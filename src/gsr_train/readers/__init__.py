"""KG-RAG readers: one interface, the built-in readers, prompts, evidence, training and generation.

* `.interface`: the `.interface.Reader` shape (``prepare`` questions with their
  evidence, ``answer`` them; ``training`` + ``save`` when trainable), ``register``;
  `.registry` builds one by name, ``_target_`` or ``gsr_train.readers`` entry point;
* the built-in readers (`.registered`): `.causal_lm` (a local causal LM fine-tuned with
  LoRA / QLoRA / fully: `.model` loading and LightningModule, `.data` answer-only labels
  and batches, `.generate` batched greedy decoding), `.prompted` (any OpenAI-compatible
  endpoint through `gsr_train.llm.client.ChatClient`) and `.retrieval_answers` (the
  evidence's top candidate);
* `.prompts`: the registered prompt formats (GSR paths / triple set, SubgraphRAG), token
  budget, answer parsing;
* `.evidence`: each split's questions and retrieved evidence (`.evidence_merge`: several
  retrievers' evidence in one prompt); `.scoring`: a reader's readings scored.

The pipeline (retrieve -> read -> score) is composed by `gsr_train.runs.reader`; metrics are
`gsr_train.eval.qa`.
"""
