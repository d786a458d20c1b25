"""How every HTTP client of the project waits before it asks again (LLM endpoints, SPARQL endpoints):
which answers are worth a retry, what the server asked for (``Retry-After``), exponential backoff with
jitter otherwise."""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping

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


def backoff(attempt: int, base: float, cap: float) -> float:
    """The wait before retry ``attempt + 1``: ``base * 2**attempt`` up to ``cap``, its upper half jittered."""
    top = min(cap, base * (2**attempt))
    return top / 2 + random.uniform(0, top / 2)
