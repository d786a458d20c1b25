"""The chat client against the project's OpenAI-compatible server over loopback (scripted backend)."""

from __future__ import annotations

import logging
import socket
import time

import httpx
import pytest

from gsr_train.llm.client import ChatClient, ChatRequest, LLMRequestError
from gsr_train.llm.server import ScriptedBackend, serve_in_thread


def _client(server, tmp_path, **kw) -> ChatClient:
    cfg = {
        "base_url": server.base_url,
        "model": "scripted",
        "cache_path": str(tmp_path / "cache.sqlite"),
        "backoff_base": 0.01,
        "backoff_max": 0.05,
        "max_retries": 3,
        "concurrency": 2,
        "api_key_env": None,
    }
    cfg.update(kw)
    return ChatClient(cfg)


def _requests(n: int) -> list[ChatRequest]:
    return [ChatRequest(f"q{i}", [{"role": "user", "content": f"question {i}"}]) for i in range(n)]


def _echo(messages, params):
    return "answer to " + messages[-1]["content"]


def test_cached_second_run_makes_no_request(tmp_path):
    with serve_in_thread(ScriptedBackend(_echo)) as srv:
        with _client(srv, tmp_path) as c:
            first = c.run(_requests(5))
            assert srv.stats.received == 5 and [r.source for r in first] == ["fresh"] * 5
        assert first[3].text == "answer to question 3"
        with _client(srv, tmp_path) as c:  # a new process would see the same sqlite file
            second = c.run(_requests(5))
            assert srv.stats.received == 5, "a cached request reached the server"
            assert [r.source for r in second] == ["cache"] * 5
            assert [r.text for r in second] == [r.text for r in first]
            assert c.stats.cached == 5 and c.stats.fresh == 0
            # changing a sampling parameter is a different request
            c.run([ChatRequest("q0", _requests(1)[0].messages, {"temperature": 0.7})])
            assert srv.stats.received == 6


def test_identical_requests_in_one_job_are_asked_once(tmp_path):
    with serve_in_thread(ScriptedBackend(_echo)) as srv, _client(srv, tmp_path) as c:
        reqs = _requests(3) + [ChatRequest("dup", _requests(3)[1].messages)]
        res = c.run(reqs)
        assert srv.stats.received == 3
        assert res[3].id == "dup" and res[3].text == res[1].text


def test_429_then_500_is_retried_and_succeeds(tmp_path):
    backend = ScriptedBackend(_echo, faults=[429, 500])
    with serve_in_thread(backend) as srv, _client(srv, tmp_path, concurrency=1) as c:
        res = c.complete([{"role": "user", "content": "hi"}], request_id="WebQTrn-1")
        assert res.text == "answer to hi" and res.source == "fresh"
        assert srv.stats.by_status == {429: 1, 500: 1, 200: 1}
        assert c.stats.retries == 2 and c.stats.fresh == 1


def test_retry_after_is_honoured(tmp_path):
    backend = ScriptedBackend(_echo, faults=[(429, {"Retry-After": "1"})])
    with serve_in_thread(backend) as srv, _client(srv, tmp_path) as c:
        t0 = time.perf_counter()
        c.complete([{"role": "user", "content": "hi"}])
        assert time.perf_counter() - t0 >= 0.95  # backoff alone would wait ~0.01 s


def test_failure_after_retries_names_the_request_or_is_skipped(tmp_path):
    with serve_in_thread(ScriptedBackend(_echo, faults=[503] * 4)) as srv, _client(srv, tmp_path, max_retries=3) as c:
        with pytest.raises(LLMRequestError, match=r"'WebQTrn-7'.*4 attempts.*HTTP 503"):
            c.complete([{"role": "user", "content": "x"}], request_id="WebQTrn-7")
        assert c.stats.failed == 1
    with (
        serve_in_thread(ScriptedBackend(_echo, faults=[503] * 4)) as srv,
        _client(srv, tmp_path, max_retries=3, on_error="skip", concurrency=1) as c,
    ):
        res = c.run(_requests(2))
        assert sorted(r.source for r in res) == ["fresh", "skipped"]
        assert c.stats.skipped == 1 and "503" in [r for r in res if not r.ok][0].error


def test_client_errors_are_not_retried(tmp_path):
    with serve_in_thread(ScriptedBackend(_echo), model_name="served") as srv, _client(srv, tmp_path) as c:
        with pytest.raises(LLMRequestError, match=r"'q0'.*HTTP 404.*not served.*not retried"):
            c.run(_requests(1))
        assert srv.stats.received == 1


def _refused_client(tmp_path, max_retries: int, **options) -> tuple[ChatClient, str]:
    """A client of a local port nothing listens on (every request is refused), and its URL: for the retry tests."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    client = ChatClient(
        {
            "base_url": url,
            "model": "m",
            "max_retries": max_retries,
            "backoff_base": 0.01,
            "cache_path": str(tmp_path / "c.sqlite"),
            **options,
        }
    )
    return client, url


def test_connection_errors_are_retried_then_reported(tmp_path):
    c, _ = _refused_client(tmp_path, max_retries=2, timeout=2)
    with pytest.raises(LLMRequestError, match=r"'q0'.*3 attempts.*ConnectError"):
        c.run(_requests(1))
    assert c.stats.retries == 2


def test_key_is_sent_but_never_stored_or_logged(tmp_path, monkeypatch, caplog):
    secret = "sk-test-DO-NOT-LEAK-1234567890"
    monkeypatch.setenv("GSR_TEST_LLM_KEY", secret)
    caplog.set_level(logging.DEBUG)
    backend = ScriptedBackend(_echo, faults=[500])
    with serve_in_thread(backend, api_key=secret) as srv, _client(srv, tmp_path, api_key_env="GSR_TEST_LLM_KEY") as c:
        c.run(_requests(3))
        assert srv.stats.by_status.get(200) == 3 and srv.stats.authorized == srv.stats.received
        assert secret not in repr(c) and secret not in repr(c.config)
    monkeypatch.setenv("GSR_TEST_LLM_KEY", "wrong-key")
    with (
        serve_in_thread(ScriptedBackend(_echo), api_key=secret) as srv,
        _client(srv, tmp_path, api_key_env="GSR_TEST_LLM_KEY", cache_path=str(tmp_path / "c2.sqlite")) as c,
    ):
        with pytest.raises(LLMRequestError, match="HTTP 401"):
            c.run(_requests(1))
    blobs = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert b"answer to question 2" in blobs  # the cache holds the answers ...
    assert secret.encode() not in blobs  # ... but never the key
    assert secret not in caplog.text


def test_server_rejects_streaming_and_lists_models():
    with serve_in_thread(ScriptedBackend("hi"), model_name="m") as srv:
        r = httpx.post(
            f"{srv.base_url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True},
        )
        assert r.status_code == 400 and "streaming is not supported" in r.json()["error"]["message"]
        r = httpx.post(f"{srv.base_url}/chat/completions", content=b"{not json")
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
        r = httpx.post(f"{srv.base_url}/chat/completions", json={"model": "m", "messages": []})
        assert r.status_code == 400
        r = httpx.get(f"{srv.base_url}/models")
        assert [m["id"] for m in r.json()["data"]] == ["m"]
        body = httpx.post(
            f"{srv.base_url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "a b c"}], "stop": ["i"]},
        ).json()
        assert body["choices"][0]["message"]["content"] == "h"
        assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}


def test_no_new_request_after_a_failure_and_a_rerun_asks_the_rest(tmp_path):
    with serve_in_thread(ScriptedBackend(_echo, faults=[400])) as srv, _client(srv, tmp_path, concurrency=1) as c:
        with pytest.raises(LLMRequestError, match=r"'q0'.*HTTP 400"):
            c.run(_requests(4))
        assert srv.stats.received == 1  # q1..q3 were not started
        res = c.run(_requests(4))
        assert [r.source for r in res] == ["fresh"] * 4 and srv.stats.received == 5


def test_an_endpoint_that_does_not_answer_is_one_line_naming_it_and_what_to_check(tmp_path):
    """After the retries, a refused connection is a user's error (one line, exit 2 in every command):
    it names the URL and what to check, not a traceback."""
    from gsr_train.data.errors import UserError, user_error_message

    c, url = _refused_client(tmp_path, max_retries=1)
    with pytest.raises(LLMRequestError) as err:
        c.run(_requests(1))
    message = user_error_message(err.value)
    assert isinstance(err.value, UserError) and message is not None and "\n" not in message
    assert f"{url} did not answer" in message
    assert "llm.base_url" in message and "llm.autostart=smollm2" in message


class _Stop(BaseException):
    """What a run's stop-signal handler raises (`RunInterrupted` is a BaseException too)."""


@pytest.fixture
def sigterm_handler():
    """Installs a SIGTERM handler for the test (``handler.calls`` counts, ``handler.stop`` raises)."""
    import signal

    def handler(_signum, _frame):
        handler.calls += 1
        if handler.stop:
            raise _Stop

    handler.calls, handler.stop = 0, True
    previous = signal.signal(signal.SIGTERM, handler)
    yield handler
    signal.signal(signal.SIGTERM, previous)


def _sigterm_on_answer(n: int):
    import os
    import signal

    answered = []

    def on_result(_res):
        answered.append(1)
        if len(answered) == n:
            os.kill(os.getpid(), signal.SIGTERM)

    return on_result


def test_sigterm_stops_the_job_at_once_and_raises_the_handlers_exception(tmp_path, sigterm_handler):
    import signal

    with serve_in_thread(ScriptedBackend(_echo, delay=0.02)) as srv, _client(srv, tmp_path, concurrency=2) as c:
        with pytest.raises(_Stop):
            c.run(_requests(200), on_result=_sigterm_on_answer(3))
        assert srv.stats.received < 20, f"{srv.stats.received} of 200 requests asked after the stop"
        assert signal.getsignal(signal.SIGTERM) is sigterm_handler, "the process's handler is back"
        assert sigterm_handler.calls == 1
        again = c.run(_requests(200))  # resumed: the answers received are in the cache, the rest is asked
        assert [r.text for r in again] == [f"answer to question {i}" for i in range(200)]
        assert srv.stats.received <= 200 + 2, "more asked again than the 2 requests in flight at the stop"


def test_sigterm_as_the_job_ends_is_not_lost(tmp_path, sigterm_handler):
    with serve_in_thread(ScriptedBackend(_echo)) as srv, _client(srv, tmp_path) as c, pytest.raises(_Stop):
        c.run(_requests(4), on_result=_sigterm_on_answer(4))


def test_a_handler_that_defers_its_stop_lets_the_job_finish(tmp_path, sigterm_handler):
    """A training run records the signal and stops at its next safe point: the job goes on."""
    sigterm_handler.stop = False
    with serve_in_thread(ScriptedBackend(_echo)) as srv, _client(srv, tmp_path) as c:
        results = c.run(_requests(30), on_result=_sigterm_on_answer(3))
    assert len(results) == 30 and all(r.ok for r in results) and sigterm_handler.calls == 1


def test_a_real_stop_signal_always_reaches_the_caller(tmp_path, sigterm_handler):
    """The probe behind the tests above: SIGTERM at a random moment of a job, many times over.
    Before, about one in fifteen was swallowed (asyncio's socket reader logged it, or Python
    dropped it in a weakref callback) and the job ran to its end."""
    import os
    import random
    import signal
    import threading

    with serve_in_thread(ScriptedBackend(_echo, delay=0.002)) as srv:
        for trial in range(25):
            timer = threading.Timer(random.uniform(0.02, 0.2), os.kill, (os.getpid(), signal.SIGTERM))
            reqs = [ChatRequest(f"{trial}-{i}", [{"role": "user", "content": f"{trial} {i}"}]) for i in range(2000)]
            with _client(srv, tmp_path, cache_path=None, concurrency=4) as c:
                timer.start()
                with pytest.raises(_Stop):
                    c.run(reqs)
            timer.join()
