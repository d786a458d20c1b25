"""How every HTTP client of the project waits before it asks again (LLM endpoints, SPARQL endpoints):
which answers are worth a retry, what the server asked for (``Retry-After``), exponential backoff with
jitter otherwise. Written once, as a tenacity policy (`retry_policy`), so both clients retry alike."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from tenacity import RetryCallState, retry_if_exception_type, stop_after_attempt, wait_exponential
from tenacity import wait_random_exponential as wait_random

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms`` or ``Retry-After``), if any."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def retryable(status: int) -> bool:
    """Whether an answer with this status is worth asking again (any 5xx too: a busy server's own code)."""
    return status in RETRY_STATUS or status >= 500


class Retryable(Exception):
    """One attempt that failed in a way worth another: ``last`` says how (one line, kept for the final
    error), ``asked`` is the server's ``Retry-After`` in seconds (None: it asked for nothing)."""

    def __init__(self, last: str, headers: Mapping[str, str] | None = None):
        super().__init__(last)
        self.last = last
        self.asked = retry_after(headers) if headers is not None else None


def wait_retry_after(base: float, cap: float, most: float) -> Callable[[RetryCallState], float]:
    """Tenacity's wait: the server's ``Retry-After`` (up to ``most``) when the last attempt carries one,
    else ``min(cap, base * 2**n) / 2`` plus a random part up to as much ("equal jitter": never 0,
    never two clients in step)."""
    half = wait_exponential(multiplier=base / 2, max=cap / 2)
    jittered = half + wait_random(multiplier=base / 2, max=cap / 2)

    def wait(state: RetryCallState) -> float:
        failed = state.outcome.exception() if state.outcome is not None and state.outcome.failed else None
        asked = failed.asked if isinstance(failed, Retryable) else None
        return min(asked, most) if asked is not None else jittered(state)

    return wait


def last_error(state: RetryCallState) -> str:
    """What the last attempt said went wrong."""
    failed = state.outcome.exception() if state.outcome is not None else None
    return failed.last if isinstance(failed, Retryable) else str(failed)


def retry_policy(
    retries: int,
    base: float,
    cap: float,
    most: float,
    on_retry: Callable[[str, int, float], None],
    give_up: Callable[[str], Exception],
) -> dict[str, Any]:
    """Keyword arguments of ``tenacity.Retrying`` / ``AsyncRetrying``: ``retries + 1`` attempts, retrying
    only `Retryable`; ``on_retry(last, retry, seconds)`` before each wait; when the attempts are
    spent, ``give_up(last)`` is raised (any other exception passes through at once)."""

    def before_sleep(state: RetryCallState) -> None:
        on_retry(last_error(state), state.attempt_number, state.upcoming_sleep)

    def error(state: RetryCallState) -> NoReturn:
        raise give_up(last_error(state))

    return {
        "stop": stop_after_attempt(retries + 1),
        "wait": wait_retry_after(base, cap, most),
        "retry": retry_if_exception_type(Retryable),
        "before_sleep": before_sleep,
        "retry_error_callback": error,
    }
