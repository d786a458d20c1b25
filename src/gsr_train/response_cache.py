"""Persistent cache of paid or slow requests (chat completions, SPARQL queries): SQLite, one committed
row per answer.

Paid calls must never be made twice and a killed job must lose nothing, so every completed
response is committed on its own as soon as it arrives (WAL journal: a crash leaves the
database consistent and several processes can share it). The key is the caller's hash of what
decides the answer (`gsr_train.llm.cache.request_key`: endpoint, model, messages, sampling;
`gsr_train.kg.sparql`: endpoint, graph, query); secrets are never part of it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CACHE_FORMAT = 1


class ResponseCache:
    """``key -> response body`` on disk; safe to share between threads and processes."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=60)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS responses ("
                " key TEXT PRIMARY KEY, request_id TEXT, model TEXT, request TEXT NOT NULL,"
                " response TEXT NOT NULL, created REAL NOT NULL)"
            )
            self._db.commit()
        except sqlite3.DatabaseError as e:
            raise RuntimeError(
                f"{self.path}: not a usable response cache ({e}); move it away to start a new one"
            ) from e

    def get(self, key: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, request: Mapping[str, Any], response: Mapping[str, Any], request_id: str = "") -> None:
        """Store one response and commit at once (so it survives a kill right after)."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, request_id, model, request, response, created)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    key,
                    request_id,
                    request.get("model", ""),
                    json.dumps(request, ensure_ascii=False),
                    json.dumps(response, ensure_ascii=False),
                    time.time(),
                ),
            )
            self._db.commit()

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM responses WHERE key = ?", (key,)).fetchone() is not None

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
