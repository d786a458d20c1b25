"""The built-in readers behind `gsr_train.readers.interface`: the causal LM fine-tuned here
(``causal-lm``), an LLM behind an OpenAI-compatible endpoint (``prompted``) and the evidence's own
top candidate (``retrieval-answers``)."""

from __future__ import annotations

from gsr_train.readers.causal_lm import CausalLMReader
from gsr_train.readers.interface import register
from gsr_train.readers.prompted import PromptedReader
from gsr_train.readers.retrieval_answers import RetrievalAnswers

register("causal-lm")(CausalLMReader)
register("prompted")(PromptedReader)
register("retrieval-answers")(RetrievalAnswers)
