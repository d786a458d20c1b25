"""``llm.autostart``: a run that needs the local LLM endpoint serves the model itself when
nothing listens at ``base_url`` (loopback only), at exactly that address, for the run only."""

from __future__ import annotations

import socket

import pytest

from gsr_train.llm import local_model
from gsr_train.llm.client import ChatClient, ChatRequest
from gsr_train.llm.server import ScriptedBackend, serve_in_thread


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ask(cfg):
    with ChatClient({**cfg, "use_cache": False, "api_key_env": None}) as client:
        return client.run([ChatRequest(id="q", messages=[{"role": "user", "content": "hi"}])])[0].text


@pytest.fixture
def loads(monkeypatch):
    calls = []

    def fake_load(model, cache_dir=None, **kw):
        calls.append(model)
        return ScriptedBackend("from the autostarted model")

    monkeypatch.setattr(local_model.TransformersBackend, "load", staticmethod(fake_load))
    return calls


def test_nothing_listening_starts_the_model_at_that_address_for_the_block(loads):
    port = _free_port()
    cfg = {"base_url": f"http://127.0.0.1:{port}/v1", "model": "SmolLM2-135M-Instruct", "autostart": "smollm2"}
    with local_model.local_endpoint(cfg) as ready:
        assert ready["base_url"] == cfg["base_url"]
        assert _ask(ready) == "from the autostarted model"
    assert loads == ["smollm2"]
    assert not local_model._listening("127.0.0.1", port)  # stopped with the block


def test_a_running_server_is_used_and_remote_or_disabled_never_start_one(loads):
    with serve_in_thread(ScriptedBackend("already running"), "SmolLM2-135M-Instruct") as server:
        port = server.server_address[1]
        cfg = {"base_url": f"http://127.0.0.1:{port}/v1", "model": "SmolLM2-135M-Instruct", "autostart": "smollm2"}
        with local_model.local_endpoint(cfg) as ready:
            assert _ask(ready) == "already running"
    for cfg in (
        {"base_url": "https://api.example.com/v1", "autostart": "smollm2"},
        {"base_url": f"http://127.0.0.1:{_free_port()}/v1", "autostart": None},
    ):
        with local_model.local_endpoint(cfg):
            pass
    assert loads == []


def test_a_second_run_serves_its_own_model_when_the_address_is_another_runs_server(loads, tmp_path):
    """Two runs at once: the second must not lean on the first run's own server (it goes away when that
    run ends); it serves its model on a free port and keeps answering after the first run ended, with
    its answers cached under base_url."""
    import contextlib

    port = _free_port()
    cfg = {"base_url": f"http://127.0.0.1:{port}/v1", "model": "SmolLM2-135M-Instruct", "autostart": "smollm2"}
    with contextlib.ExitStack() as second_run:
        with local_model.local_endpoint(cfg) as first:  # the first run serves at base_url
            assert "serve_url" not in first
            second = second_run.enter_context(local_model.local_endpoint(cfg))
            assert second["serve_url"] != second["base_url"] and second["base_url"] == cfg["base_url"]
            assert loads == ["smollm2", "smollm2"]
        # the first run ended (its server is gone); the second still answers
        with ChatClient({**second, "cache_path": str(tmp_path / "c.sqlite"), "api_key_env": None}) as client:
            request = ChatRequest(id="q", messages=[{"role": "user", "content": "hi"}])
            assert client.run([request])[0].text == "from the autostarted model"
            assert client.base_url == cfg["base_url"] and client.cache.get(client.key(request)) is not None


def test_require_endpoint_refuses_a_local_address_where_nothing_listens():
    """Checked before any work (a run that calls an LLM with ``llm.autostart: null``): one line naming
    the URL and what to check. A listening server, and a remote address, pass."""
    from gsr_train.data.errors import UserError

    port = _free_port()
    with pytest.raises(UserError) as err:
        local_model.require_endpoint({"base_url": f"http://127.0.0.1:{port}/v1", "autostart": None})
    assert str(err.value).startswith(f"llm.base_url=http://127.0.0.1:{port}/v1: nothing listens at 127.0.0.1:{port}; ")
    assert "llm.autostart=smollm2" in str(err.value) and "\n" not in str(err.value)
    with serve_in_thread(ScriptedBackend("up"), "m") as server:
        local_model.require_endpoint({"base_url": f"http://127.0.0.1:{server.server_address[1]}/v1"})
    local_model.require_endpoint({"base_url": "https://api.example.com/v1"})
