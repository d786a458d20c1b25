"""The prompted reader (``qa.reading.method=prompted``, or ``qa.backend=llm``): an unfine-tuned LLM
behind any OpenAI-compatible endpoint (``llm=...``) answers the run's prompts, through the project's
chat client (response cache, retries, cost accounting). With ``llm.autostart`` and nothing listening
at ``llm.base_url`` the run serves that model itself while it reads (`local_endpoint`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from gsr_train.llm.local_model import local_endpoint, require_endpoint
from gsr_train.readers.generate import generate_remote
from gsr_train.readers.interface import Evidence, Question, Reading, ReadingInputs
from gsr_train.readers.prompts import ReaderExample, build_examples, parse_response, prompt_format


class PromptedReader:
    """Prompts in ``qa.format`` (evidence not cut to a token budget: the endpoint's tokenizer is not
    at hand), sent as one batch of requests per variant; ``figures['llm_usage']``: the client's counts."""

    variant = "prompting"

    def __init__(self, inputs: ReadingInputs) -> None:
        self.inputs, self.format = inputs, prompt_format(inputs.format)
        self.name = str(inputs.llm.get("model"))
        self.figures: dict[str, Any] = {"llm_usage": {}}
        self._stack: contextlib.ExitStack | None = None
        self._endpoint: dict | None = None

    def __enter__(self) -> PromptedReader:
        """Serve the model here when the options ask for it (until ``__exit__``)."""
        self._stack = contextlib.ExitStack()
        i = self.inputs
        self._endpoint = self._stack.enter_context(local_endpoint(dict(i.llm), i.cache_dir, i.device or "cpu"))
        try:
            require_endpoint(self._endpoint)  # nothing listening: one line before reading, not after the retries
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._stack is not None:
            self._stack.close()
        self._stack, self._endpoint = None, None

    def prepare(self, questions: Sequence[Question], evidence: Evidence) -> list[ReaderExample]:
        return build_examples(questions, evidence, self.format, self.inputs.k, icl=self.inputs.icl)

    def answer(self, batch: Sequence[ReaderExample]) -> list[Reading]:
        if self._endpoint is None:  # used outside a `with` block: the endpoint for this call only
            with self:
                return self.answer(batch)
        max_new = self.inputs.eval.get("max_new_tokens")
        texts, usage = generate_remote(self._endpoint, batch, int(max_new) if max_new else None)
        self.figures["llm_usage"].update(usage)
        return [Reading(text, parse_response(text, self.format)) for text in texts]
