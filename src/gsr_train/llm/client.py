"""Chat completions against any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, the local server).

What a data-building job needs from a client, and what this one does:

* never pay twice: every answer goes to a persistent `gsr_train.llm.cache.ResponseCache`
  keyed by (endpoint, model, messages, sampling parameters), committed as soon as it arrives,
  so a re-run or a resumed job only asks what has not been answered yet;
* be polite and robust: bounded concurrency (asyncio semaphore over one ``httpx.AsyncClient``),
  timeouts, retries with exponential backoff and jitter on 429 / 5xx / connection errors,
  honouring ``Retry-After``; a request that still fails raises an error naming its id, or is
  counted and skipped if the user chose ``on_error: skip``; on a failure no new request starts,
  but those in flight finish and are cached;
* keep the key secret: it is read from the environment variable named by ``api_key_env``,
  sent only in the ``Authorization`` header, scrubbed from error texts and never part of a
  cache key, a log line or a file;
* count tokens and cost (`gsr_train.llm.usage.UsageStats`);
* stop at once on a stop signal: while a batch is asked the process's stop handlers are called
  from the event loop, so what they raise (a run's `RunInterrupted`) cancels the batch and reaches
  the caller, instead of being logged and dropped by asyncio (`gsr_train.llm.stop_signals`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from omegaconf import DictConfig
from tenacity import AsyncRetrying

from gsr_train.config import as_dict, default_cache_dir, option
from gsr_train.data.errors import UserError
from gsr_train.http_retry import Retryable, retry_policy, retryable
from gsr_train.llm.cache import ResponseCache, normalise_base_url, request_key
from gsr_train.llm.stop_signals import StopSignals
from gsr_train.llm.usage import UsageStats

log = logging.getLogger(__name__)

_TRANSPORT = "no answer: "  # how a failed connection starts the last error
SAMPLING_KEYS = ("temperature", "max_tokens", "seed", "top_p")


class LLMRequestError(UserError, RuntimeError):
    """A request that failed for good; the message, one line, names the request id and the last
    error. A user's to fix (the endpoint, the model, the key): commands report it in one line."""

    def __init__(self, request_id: str, message: str):
        self.request_id = request_id
        super().__init__(" ".join(f"LLM request {request_id!r}: {message}".split()))


UNREACHABLE_HINT = (
    "check that an OpenAI-compatible server answers there (llm.base_url; gsr-train serve-llm starts the "
    "project's own), or set llm.autostart=smollm2 to serve the local model from the run"
)


@dataclass
class LLMConfig:
    """Endpoint, sampling and robustness settings (mirrors ``conf/llm/*.yaml``)."""

    base_url: str = option("http://127.0.0.1:8000/v1", "the OpenAI-compatible endpoint")
    model: str = option("SmolLM2-135M-Instruct", "the model name sent with every request")
    api_key_env: str | None = option(
        "OPENAI_API_KEY", "NAME of the environment variable holding the key (never the key)"
    )
    temperature: float | None = option(0.0, "sampling temperature (null: the server's default)", ge=0)
    max_tokens: int | None = option(256, "most tokens per answer (null: the server's default)", ge=1)
    seed: int | None = option(0, "sampling seed sent with each request (null: none)")
    top_p: float | None = option(None, "nucleus sampling (null: the server's default)", gt=0, le=1)
    extra_params: dict = option({}, "any other request field, e.g. {stop: [...], max_completion_tokens: 512}")
    concurrency: int = option(4, "requests in flight at once", ge=1)
    timeout: float = option(120.0, "seconds per request before it is retried", gt=0)
    max_retries: int = option(6, "retries of a failed request (429, 5xx, timeouts)", ge=0)
    backoff_base: float = option(1.0, "seconds of the first retry's wait (doubled per retry, with jitter)", ge=0)
    backoff_max: float = option(60.0, "longest wait between retries, in seconds", ge=0)
    retry_after_max: float = option(300.0, "longest Retry-After a server may ask for, in seconds", ge=0)
    on_error: Literal["raise", "skip"] = option(
        "raise", "a request that fails after its retries: raise, or count and skip it"
    )
    cache_path: str | None = option(None, "the response cache (null: <cache dir>/llm/responses.sqlite)")
    use_cache: bool = option(True, "answer repeated requests from the cache")
    price_input_per_m: float = option(0.0, "USD per million prompt tokens (for the cost line)", ge=0)
    price_output_per_m: float = option(0.0, "USD per million answer tokens (for the cost line)", ge=0)
    log_every: int = option(50, "log progress every N answers", ge=1)
    # a model ("smollm2", a folder) that a run may serve itself at base_url when nothing listens
    # there (loopback addresses only; see gsr_train.llm.local_model.local_endpoint); null: never
    autostart: str | None = option(
        None, "a model (smollm2, a folder) the run serves itself when nothing listens at base_url (null: never)"
    )
    # where requests go when it is not base_url: set by a run that serves its own model elsewhere
    # because base_url is taken by another run's (see local_endpoint); answers stay cached under base_url
    serve_url: str | None = option(None, "where requests go instead of base_url (set by a run serving its own model)")

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any] | LLMConfig) -> LLMConfig:
        """Build from a dict / OmegaConf node; unknown keys are an error (typos cost money)."""
        if isinstance(cfg, LLMConfig):
            return cfg
        if isinstance(cfg, DictConfig):
            cfg = as_dict(cfg)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(cfg) - names)
        if unknown:
            raise ValueError(f"llm config: unknown keys {unknown} (known: {sorted(names)})")
        out = cls(**{k: v for k, v in cfg.items()})
        if out.on_error not in ("raise", "skip"):
            raise ValueError(f"llm config: on_error must be 'raise' or 'skip', not {out.on_error!r}")
        if out.concurrency < 1:
            raise ValueError(f"llm config: concurrency must be >= 1, not {out.concurrency}")
        return out

    def sampling(self) -> dict:
        params = {k: getattr(self, k) for k in SAMPLING_KEYS}
        params.update(self.extra_params or {})
        return {k: v for k, v in params.items() if v is not None}


@dataclass
class ChatRequest:
    id: str  # names the request in errors and logs (question id, relation, ...)
    messages: list[dict]
    params: dict = field(default_factory=dict)  # per-request overrides of the sampling params


@dataclass
class ChatResult:
    id: str
    key: str
    text: str | None
    body: dict | None
    source: str  # fresh | cache | output | skipped | not_run
    seconds: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.text is not None


def default_cache_path() -> Path:

    return default_cache_dir() / "llm" / "responses.sqlite"


def _is_local(base_url: str) -> bool:
    host = httpx.URL(base_url).host
    return host in ("127.0.0.1", "localhost", "::1", "0.0.0.0")


class ChatClient:
    """Runs chat requests through the cache and the endpoint; see the module docstring."""

    def __init__(
        self,
        config: LLMConfig | Mapping[str, Any],
        stats: UsageStats | None = None,
        cache: ResponseCache | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.config = LLMConfig.from_mapping(config)
        self.base_url = normalise_base_url(self.config.base_url)  # the endpoint's identity (cache keys)
        self.send_url = normalise_base_url(self.config.serve_url) if self.config.serve_url else self.base_url
        self.stats = stats or UsageStats(self.config.price_input_per_m, self.config.price_output_per_m)
        if cache is None and self.config.use_cache:
            cache = ResponseCache(self.config.cache_path or default_cache_path())
        self.cache = cache
        self._transport = transport
        env = self.config.api_key_env
        self.__key = os.environ.get(env) if env else None
        if env and not self.__key and not _is_local(self.base_url):
            log.warning(
                "environment variable %s is not set: sending requests to %s without an API key", env, self.base_url
            )

    def __repr__(self) -> str:  # never show the key
        return f"ChatClient(base_url={self.base_url!r}, model={self.config.model!r})"

    # ------------------------------------------------------------------ helpers
    def params(self, request: ChatRequest) -> dict:
        params = self.config.sampling()
        params.update(request.params or {})
        return {k: v for k, v in params.items() if v is not None}

    def key(self, request: ChatRequest) -> str:
        return request_key(self.base_url, self.config.model, request.messages, self.params(request))

    def _scrub(self, text: str) -> str:
        return text.replace(self.__key, "***") if self.__key else text

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.__key:
            headers["Authorization"] = f"Bearer {self.__key}"
        return headers

    # ------------------------------------------------------------------ one request
    async def _post(self, http: httpx.AsyncClient, request: ChatRequest, payload: dict) -> dict:
        """POST with retries (the shared policy of `gsr_train.http_retry`); returns the parsed body
        or raises `LLMRequestError`."""
        cfg = self.config

        def on_retry(last: str, retry: int, delay: float) -> None:
            self.stats.count("retries")
            log.info("request %s: %s; retry %d/%d in %.2fs", request.id, last[:200], retry, cfg.max_retries, delay)

        def give_up(last: str) -> LLMRequestError:
            hint = f"; {self.send_url} did not answer: {UNREACHABLE_HINT}" if last.startswith(_TRANSPORT) else ""
            return LLMRequestError(request.id, f"failed after {cfg.max_retries + 1} attempts; last error: {last}{hint}")

        policy = retry_policy(
            cfg.max_retries, cfg.backoff_base, cfg.backoff_max, cfg.retry_after_max, on_retry, give_up
        )
        retrying = AsyncRetrying(sleep=lambda s: asyncio.sleep(s), **policy)
        return await retrying(self._attempt, http, request, payload)

    async def _attempt(self, http: httpx.AsyncClient, request: ChatRequest, payload: dict) -> dict:
        """One POST: the body, `Retryable` (worth another try), or `LLMRequestError`."""
        try:
            resp = await http.post(f"{self.send_url}/chat/completions", json=payload, headers=self._headers())
        except httpx.TransportError as e:
            raise Retryable(f"{_TRANSPORT}{type(e).__name__}: {self._scrub(str(e)) or 'connection failed'}") from None
        if resp.status_code != 200:
            last = f"HTTP {resp.status_code} from {self.base_url}: {self._scrub(resp.text[:500])}"
            if not retryable(resp.status_code):
                raise LLMRequestError(request.id, last + " (not retried)")
            raise Retryable(last, resp.headers)
        try:
            body = resp.json()
            text = body["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise LLMRequestError(
                request.id,
                f"{self.base_url} answered 200 with an unexpected body "
                f"({type(e).__name__}): {self._scrub(resp.text[:300])!r}",
            ) from None
        if not isinstance(text, str):
            raise LLMRequestError(
                request.id,
                f"{self.base_url} returned no message content "
                f"(finish_reason={body['choices'][0].get('finish_reason')})",
            )
        return body

    async def _one(
        self, http: httpx.AsyncClient, sem: asyncio.Semaphore, request: ChatRequest, key: str, stop: asyncio.Event
    ) -> ChatResult:
        if self.cache is not None:
            body = self.cache.get(key)
            if body is not None:
                self.stats.add_response(body, "cache")
                return ChatResult(request.id, key, body["choices"][0]["message"]["content"], body, "cache")
        async with sem:
            if stop.is_set():
                return ChatResult(request.id, key, None, None, "not_run", error="job stopped after a failure")
            payload = {
                "model": self.config.model,
                "messages": request.messages,
                **self.params(request),
                "stream": False,
            }
            t0 = time.perf_counter()
            try:
                body = await self._post(http, request, payload)
            except LLMRequestError as e:
                if self.config.on_error == "skip":
                    self.stats.count("skipped")
                    log.warning("%s (skipped)", e)
                    return ChatResult(request.id, key, None, None, "skipped", time.perf_counter() - t0, str(e))
                self.stats.count("failed")
                stop.set()
                raise
            seconds = time.perf_counter() - t0
        if self.cache is not None:
            cached_request = {
                "model": self.config.model,
                "endpoint": self.base_url,
                "messages": request.messages,
                "params": self.params(request),
            }
            self.cache.put(key, cached_request, body, request.id)
        self.stats.add_response(body, "fresh", seconds)
        return ChatResult(request.id, key, body["choices"][0]["message"]["content"], body, "fresh", seconds)

    # ------------------------------------------------------------------ many requests
    async def arun(
        self,
        requests: Sequence[ChatRequest],
        on_result: Callable[[ChatResult], None] | None = None,
        reuse: Mapping[str, str] | None = None,
        stops: StopSignals | None = None,
    ) -> list[ChatResult]:
        """Answer all requests (same order); ``reuse`` maps a request key to a known answer text.
        A stop signal that ``stops`` delivers ends the job at once, and its exception is raised here."""
        if stops is not None:
            stops.watch()
        try:
            results = await self._ask_all(requests, on_result, reuse or {})
        except asyncio.CancelledError:
            if stops is not None:
                stops.reraise()
            raise
        if stops is not None:
            stops.reraise()
        return results

    async def _ask_all(
        self,
        requests: Sequence[ChatRequest],
        on_result: Callable[[ChatResult], None] | None,
        reuse: Mapping[str, str],
    ) -> list[ChatResult]:
        keys = [self.key(r) for r in requests]
        results: list[ChatResult | None] = [None] * len(requests)
        first_of: dict[str, int] = {}
        todo = []
        for i, (req, key) in enumerate(zip(requests, keys)):
            if key in reuse:
                reused = ChatResult(req.id, key, reuse[key], None, "output")
                results[i] = reused
                self.stats.count("reused")
                if on_result:
                    on_result(reused)
            elif key in first_of:  # identical request in the same job: ask once
                continue
            else:
                first_of[key] = i
                todo.append(i)
        sem = asyncio.Semaphore(self.config.concurrency)
        stop = asyncio.Event()
        limits = httpx.Limits(
            max_connections=self.config.concurrency, max_keepalive_connections=self.config.concurrency
        )
        done = 0
        async with httpx.AsyncClient(timeout=self.config.timeout, limits=limits, transport=self._transport) as http:

            async def task(i: int) -> None:
                nonlocal done
                res = await self._one(http, sem, requests[i], keys[i], stop)
                results[i] = res
                done += 1
                if self.config.log_every and done % self.config.log_every == 0:
                    log.info("%d/%d requests answered", done, len(todo))
                if on_result and res.source != "not_run":
                    on_result(res)

            outcomes = await asyncio.gather(*(task(i) for i in todo), return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:
            for e in errors:
                if not isinstance(e, LLMRequestError):
                    raise e
            if len(errors) > 1:
                log.error("%d requests failed; first: %s", len(errors), errors[0])
            raise errors[0]
        for i, (req, key) in enumerate(zip(requests, keys)):
            if results[i] is None:  # duplicate of an earlier request
                results[i] = self._copy_answer(results[first_of[key]], req.id, on_result)
        return results  # type: ignore[return-value]

    def _copy_answer(
        self, src: ChatResult | None, request_id: str, on_result: Callable[[ChatResult], None] | None
    ) -> ChatResult:
        """The answer of an identical request asked earlier in the job, under this request's id."""
        assert src is not None, "every first request was answered (a failure raised above)"
        if src.ok and src.body is not None:
            copy = dataclasses.replace(src, id=request_id, source="cache", seconds=0.0)
            self.stats.add_response(src.body, "cache")
        else:
            copy = dataclasses.replace(src, id=request_id)
        if on_result:
            on_result(copy)
        return copy

    def run(
        self,
        requests: Iterable[ChatRequest],
        on_result: Callable[[ChatResult], None] | None = None,
        reuse: Mapping[str, str] | None = None,
    ) -> list[ChatResult]:
        """Synchronous `arun`; a stop signal is handled inside its event loop (`StopSignals`)."""
        with asyncio.Runner() as runner, StopSignals(runner.get_loop()) as stops:
            return runner.run(self.arun(list(requests), on_result, reuse, stops))

    def complete(self, messages: list[dict], request_id: str = "request", **params) -> ChatResult:
        """One request (through the cache)."""
        return self.run([ChatRequest(request_id, messages, params)])[0]

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
