"""A small OpenAI-compatible HTTP server: ``POST /v1/chat/completions`` and ``GET /v1/models``.

It lets users without API access run the LLM data steps on a local model, and lets the tests
exercise the real client path (HTTP, JSON, retries, cache) over loopback. Non-streaming only:
``stream: true`` is answered with a clear 400. Generation is serialised (one at a time) since a
CPU model gains nothing from parallel calls.

Backends: `gsr_train.llm.local_model.TransformersBackend` (a real causal LM with its
chat template) and `ScriptedBackend` (canned answers and injected faults such as 429 then
500 before success, for tests; the HTTP and JSON path stays real).

    python data_prep/serve_local_llm.py --port 8000                  # SmolLM2-135M-Instruct, offline
    python data_prep/serve_local_llm.py --model /path/to/hf_model_folder --name my-model
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

log = logging.getLogger(__name__)


@dataclass
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str = "stop"
    # OpenAI's ``choices[0].logprobs.content``: per generated token ``{token, logprob,
    # top_logprobs: [{token, logprob}, ...]}``; None when the backend cannot give them
    logprobs: list[dict] | None = None


class Backend(Protocol):
    def generate(self, messages: list[dict], params: dict) -> Generation: ...


class RequestError(Exception):
    """An invalid request: answered with ``status`` and an OpenAI-style error body."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", headers: dict | None = None):
        super().__init__(message)
        self.status, self.type, self.headers = status, type_, headers or {}


def _count_words(messages: Sequence[dict]) -> int:
    return sum(len(str(m.get("content", "")).split()) for m in messages)


class ScriptedBackend:
    """Test backend: ``respond(messages, params) -> str``, with injected faults first.

    ``faults`` is consumed one per request before answering normally: an int status (429,
    500, ...) or ``(status, headers)``. ``block_after=n`` makes request ``n+1`` onward wait on
    `gate` (to kill a client mid-job); `release` lets them through.
    """

    def __init__(
        self,
        respond: Callable[[list[dict], dict], str | Generation] | str = "ok",
        faults: Sequence[int | tuple[int, dict]] = (),
        block_after: int | None = None,
        delay: float = 0.0,
    ):
        self.respond = respond if callable(respond) else (lambda m, p, _r=respond: _r)
        self.faults = list(faults)
        self.block_after = block_after
        self.delay = delay
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.answered = 0

    def release(self) -> None:
        self.gate.set()

    def generate(self, messages: list[dict], params: dict) -> Generation:
        with self.lock:
            fault = self.faults.pop(0) if self.faults else None
            n = self.answered
            if fault is None:
                self.answered += 1
        if fault is not None:
            status, headers = fault if isinstance(fault, tuple) else (fault, {})
            raise RequestError(status, f"injected fault {status}", "server_error", headers)
        if self.block_after is not None and n >= self.block_after:
            self.gate.wait()
        if self.delay:
            time.sleep(self.delay)
        answer = self.respond(messages, params)
        if isinstance(answer, Generation):  # a script that also gives token log-probabilities
            return answer
        return Generation(answer, _count_words(messages), len(answer.split()))


@dataclass
class ServerStats:
    """What the server saw: tests count requests here."""

    received: int = 0  # chat completion POSTs
    completed: int = 0  # answered 200
    by_status: dict = field(default_factory=dict)
    authorized: int = 0  # requests that carried an Authorization header
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def note(self, status: int) -> None:
        with self.lock:
            self.by_status[status] = self.by_status.get(status, 0) + 1
            self.completed += status == 200


def _validate(body: Any, model_name: str, max_tokens_limit: int) -> dict:
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object")
    if body.get("stream"):
        raise RequestError(400, 'streaming is not supported by this server: send "stream": false')
    model = body.get("model")
    if model is not None and model != model_name:
        raise RequestError(
            404, f"model {model!r} is not served here (this server serves {model_name!r})", "model_not_found"
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list")
    for i, m in enumerate(messages):
        if (
            not isinstance(m, dict)
            or m.get("role") not in ("system", "user", "assistant")
            or not isinstance(m.get("content"), str)
        ):
            raise RequestError(400, f"messages[{i}] must be {{'role': system|user|assistant, 'content': str}}")
    if body.get("n", 1) != 1:
        raise RequestError(400, "only n=1 is supported")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 256))
    if not isinstance(max_tokens, int) or max_tokens < 1 or max_tokens > max_tokens_limit:
        raise RequestError(400, f"max_tokens must be an integer in 1..{max_tokens_limit}")
    temperature = body.get("temperature", 1.0)
    if not isinstance(temperature, (int, float)) or temperature < 0:
        raise RequestError(400, "temperature must be a number >= 0")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise RequestError(400, "stop must be a string or a list of strings")
    seed = body.get("seed")
    if seed is not None and not isinstance(seed, int):
        raise RequestError(400, "seed must be an integer")
    penalty = body.get("repetition_penalty")  # vLLM's extra parameter (> 1 discourages repeats)
    if penalty is not None and (not isinstance(penalty, (int, float)) or isinstance(penalty, bool) or penalty <= 0):
        raise RequestError(400, "repetition_penalty must be a number > 0")
    top_logprobs = body.get("top_logprobs")
    if top_logprobs is not None and (not isinstance(top_logprobs, int) or not 0 <= top_logprobs <= 20):
        raise RequestError(400, "top_logprobs must be an integer in 0..20")
    return {
        "logprobs": bool(body.get("logprobs")),
        "top_logprobs": int(top_logprobs or 0),
        "max_tokens": max_tokens,
        "temperature": float(temperature),
        "top_p": body.get("top_p"),
        "repetition_penalty": None if penalty is None else float(penalty),
        "seed": seed,
        "stop": stop,
    }


def _apply_stop(gen: Generation, stop: list[str] | None) -> Generation:
    if not stop:
        return gen
    cut = min((gen.text.find(s) for s in stop if s and s in gen.text), default=-1)
    if cut < 0:
        return gen
    return Generation(gen.text[:cut], gen.prompt_tokens, gen.completion_tokens, "stop", gen.logprobs)


class ChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address, backend: Backend, model_name: str, api_key: str | None = None, max_tokens_limit: int = 4096
    ):
        super().__init__(address, _Handler)
        self.backend = backend
        self.model_name = model_name
        self.api_key = api_key
        self.max_tokens_limit = max_tokens_limit
        self.stats = ServerStats()
        self.generate_lock = threading.Lock()
        # a run's own server (llm.autostart): it goes away with that run, so no other run should use it
        self.ephemeral = False

    def handle_error(self, request, client_address) -> None:
        """A client that went away (killed job, timeout) is not a server error."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            log.debug("client %s disconnected", client_address)
            return
        super().handle_error(request, client_address)

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        if isinstance(host, (bytes, bytearray)):  # typeshed allows bytes; a bound TCP server reports str
            host = host.decode()
        return f"http://{host}:{port}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args) -> None:  # route to logging, quiet by default
        log.debug("%s %s", self.address_string(), fmt % args)

    def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, e: RequestError) -> None:
        self._send(e.status, {"error": {"message": str(e), "type": e.type, "code": e.status}}, e.headers)

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(
                200,
                {
                    "object": "list",
                    "data": [{"id": self.server.model_name, "object": "model", "created": 0, "owned_by": "local"}],
                },
            )
        elif self.path.rstrip("/") in ("", "/health"):
            self._send(200, {"status": "ok", "model": self.server.model_name, "ephemeral": self.server.ephemeral})
        else:
            self._error(RequestError(404, f"no route GET {self.path}", "not_found"))

    def do_POST(self) -> None:
        srv = self.server
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(RequestError(404, f"no route POST {self.path}", "not_found"))
            return
        with srv.stats.lock:
            srv.stats.received += 1
            srv.stats.authorized += bool(self.headers.get("Authorization"))
        try:
            if srv.api_key is not None and self.headers.get("Authorization") != f"Bearer {srv.api_key}":
                raise RequestError(401, "missing or wrong API key", "authentication_error")
            try:
                body = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise RequestError(400, f"request body is not valid JSON ({e})") from None
            params = _validate(body, srv.model_name, srv.max_tokens_limit)
            concurrent = isinstance(srv.backend, ScriptedBackend) or getattr(srv.backend, "concurrent", False)
            with contextlib.nullcontext() if concurrent else srv.generate_lock:
                gen = srv.backend.generate(body["messages"], params)
            gen = _apply_stop(gen, params["stop"])
        except RequestError as e:
            srv.stats.note(e.status)
            self._error(e)
            return
        except Exception as e:  # a backend crash is a 500, the server keeps running
            log.exception("generation failed")
            srv.stats.note(500)
            self._error(RequestError(500, f"generation failed: {type(e).__name__}: {e}", "server_error"))
            return
        srv.stats.note(200)
        self._send(
            200,
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": srv.model_name,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": gen.text},
                        "logprobs": {"content": gen.logprobs} if params["logprobs"] and gen.logprobs else None,
                        "finish_reason": gen.finish_reason,
                    }
                ],
                "usage": {
                    "prompt_tokens": gen.prompt_tokens,
                    "completion_tokens": gen.completion_tokens,
                    "total_tokens": gen.prompt_tokens + gen.completion_tokens,
                },
            },
        )


def make_server(
    backend: Backend,
    model_name: str,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    max_tokens_limit: int = 4096,
) -> ChatServer:
    """A server bound to ``host:port`` (port 0 = any free port); call ``serve_forever``."""
    return ChatServer((host, port), backend, model_name, api_key, max_tokens_limit)


@contextlib.contextmanager
def serve_in_thread(backend: Backend, model_name: str = "scripted", **kwargs) -> Iterator[ChatServer]:
    """Run a server on an ephemeral loopback port in a daemon thread; shut it down on exit."""
    server = make_server(backend, model_name, **kwargs)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        if isinstance(backend, ScriptedBackend):
            backend.release()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
