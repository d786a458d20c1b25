"""The chat-completion cache key; the cache itself is `gsr_train.response_cache.ResponseCache`
(shared with the SPARQL client). The key is a hash of what decides the answer: the endpoint's base URL,
the model, the messages and the sampling parameters. The API key is not part of it and is never stored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gsr_train.response_cache import CACHE_FORMAT, ResponseCache

__all__ = ["CACHE_FORMAT", "ResponseCache", "normalise_base_url", "request_key"]


def normalise_base_url(base_url: str) -> str:
    """``http://host:8000/v1/`` and ``http://host:8000/v1`` name the same endpoint."""
    return base_url.strip().rstrip("/")


def request_key(base_url: str, model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of everything that decides the response."""
    payload = {
        "format": CACHE_FORMAT,
        "endpoint": normalise_base_url(base_url),
        "model": model,
        "messages": [dict(m) for m in messages],
        "params": {k: v for k, v in sorted(params.items()) if v is not None},
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()
