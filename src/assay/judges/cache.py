"""A content-addressed on-disk cache of judge calls, in one SQLite file.

The key is a hash of everything that decides a call's answer (for LLM calls,
`openai/endpoint.call_key`: who answers, the response format, the whole request, the prompt
version), so a repeated run over the same rows makes no calls, and any change to those makes a
fresh call. What goes in is decided by the caller: only real, readable answers. Entries expire
after a time to live. The cache is an optimisation: if the file cannot be opened or read, the
judge logs it and calls the endpoint.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS judge_calls (
    key TEXT PRIMARY KEY,
    created REAL NOT NULL,
    value TEXT NOT NULL
)
"""


def cache_key(parts: Mapping[str, Any]) -> str:
    """The sha256 of `parts` as canonical JSON (sorted keys, no whitespace)."""
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


#: Age in seconds past which any opening of the cache deletes an entry (the default ttl).
PURGE_AFTER = 30 * 24 * 3600.0


class CallCache:
    """Judge calls by key, stored in SQLite.

    path: the database file (its folder is created on first use).
    ttl: seconds an entry stays valid for this reader: older entries read as missing. Opening
        the file purges only entries older than `PURGE_AFTER` or this ttl, whichever is
        longer: a run with a short ttl must not delete what other runs may still read.

    Safe to share between threads and event loops of one process (one connection behind a lock);
    several processes may share the file (SQLite's WAL mode serialises their writes).
    """

    def __init__(self, path: Path, ttl: float) -> None:
        self.path = path
        self.ttl = ttl
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._broken = False

    def _connect(self) -> sqlite3.Connection | None:
        if self._connection is not None or self._broken:
            return self._connection
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(_SCHEMA)
            oldest = time.time() - max(self.ttl, PURGE_AFTER)
            connection.execute("DELETE FROM judge_calls WHERE created < ?", (oldest,))
            connection.commit()
        except (OSError, sqlite3.Error) as error:
            # Caching is an optimisation; a run must not fail because the cache file is unusable.
            logger.warning(
                "judge-call cache %s unusable (%s); calling without it", self.path, error
            )
            self._broken = True
            return None
        self._connection = connection
        return connection

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored value for `key`, or None when absent, expired or unreadable."""
        with self._lock:
            connection = self._connect()
            if connection is None:
                return None
            try:
                row = connection.execute(
                    "SELECT created, value FROM judge_calls WHERE key = ?", (key,)
                ).fetchone()
            except sqlite3.Error as error:
                logger.warning("judge-call cache read failed: %s", error)
                return None
        if row is None or row[0] < time.time() - self.ttl:
            return None
        try:
            value = json.loads(row[1])
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        """Store `value` (JSON-serialisable) under `key`, replacing any older entry."""
        with self._lock:
            connection = self._connect()
            if connection is None:
                return
            try:
                connection.execute(
                    "INSERT OR REPLACE INTO judge_calls (key, created, value) VALUES (?, ?, ?)",
                    (key, time.time(), json.dumps(value, ensure_ascii=False)),
                )
                connection.commit()
            except sqlite3.Error as error:
                logger.warning("judge-call cache write failed: %s", error)

    def __len__(self) -> int:
        with self._lock:
            connection = self._connect()
            if connection is None:
                return 0
            (count,) = connection.execute("SELECT COUNT(*) FROM judge_calls").fetchone()
            return int(count)

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
