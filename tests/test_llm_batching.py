"""The local server's batching: requests sent together are generated together, with the answers
(and token log-probabilities) each would get alone, over the real HTTP path."""

from __future__ import annotations

import pytest

from gsr_train.llm.client import ChatClient, ChatRequest
from gsr_train.llm.server import serve_in_thread

from .test_reader_helpers import tiny_llama_folder


@pytest.fixture(scope="module")
def tiny_backend(tmp_path_factory):
    from gsr_train.llm.local_model import TransformersBackend

    return TransformersBackend.load(tiny_llama_folder(tmp_path_factory.mktemp("llama"), context=512))


def _asks(n, **params):
    return [
        ChatRequest(
            f"r{i}", [{"role": "user", "content": f"question number {i} " * (i + 1)}], {"max_tokens": 6, **params}
        )
        for i in range(n)
    ]


def test_batched_answers_equal_single_answers_and_batches_form(tiny_backend):
    from gsr_train.llm.local_model import BatchingBackend

    singles = [
        tiny_backend.generate(r.messages, {"max_tokens": 6, "logprobs": True, "top_logprobs": 2}) for r in _asks(5)
    ]
    batcher = BatchingBackend(tiny_backend, max_batch=8, window=0.2)
    sizes = []
    real = tiny_backend.generate_batch

    def counted(prompts, params):
        sizes.append(len(prompts))
        return real(prompts, params)

    tiny_backend.generate_batch = counted  # type: ignore[method-assign]
    try:
        with serve_in_thread(batcher, "tiny") as srv:
            client = ChatClient(
                {"base_url": srv.base_url, "model": "tiny", "use_cache": False, "concurrency": 8, "api_key_env": None}
            )
            results = client.run(_asks(5, logprobs=True, top_logprobs=2))
            # sampled requests (temperature > 0) are never batched with others
            client.run(_asks(2, temperature=1.0, seed=3))
    finally:
        del tiny_backend.generate_batch
    assert [r.text for r in results] == [g.text for g in singles]
    for r, g in zip(results, singles):
        got = r.body["choices"][0]["logprobs"]["content"]
        assert [t["token"] for t in got] == [t["token"] for t in g.logprobs]
        assert [t["logprob"] for t in got] == pytest.approx([t["logprob"] for t in g.logprobs], abs=1e-4)
    assert sizes[0] == 5 and sizes[1:] == [1, 1]


def test_a_prompt_too_long_is_a_400_for_that_request_only(tiny_backend):
    from gsr_train.llm.client import LLMRequestError
    from gsr_train.llm.local_model import BatchingBackend

    with serve_in_thread(BatchingBackend(tiny_backend), "tiny") as srv:
        client = ChatClient(
            {"base_url": srv.base_url, "model": "tiny", "use_cache": False, "api_key_env": None, "max_retries": 0}
        )
        ok = client.run(_asks(1))[0]
        assert ok.text is not None
        with pytest.raises(LLMRequestError, match="exceeds the model's context"):
            client.run([ChatRequest("long", [{"role": "user", "content": "word " * 600}], {"max_tokens": 6})])
