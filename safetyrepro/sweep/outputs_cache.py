"""A content-addressed cache of model outputs, shared by every sweep on the machine.

Key: the weights' content hash, precision, the exact model input text, and everything that decides
the output (kind, continuation or decoding settings, seed). A hit returns exactly what the model
returned the first time, so a cached rerun is bit-identical and does no model work. SQLite in WAL
mode lets several processes (Ray workers, a resumed sweep) share it safely.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any


def cache_key(**fields: Any) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class OutputsCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._conn() as c:
            c.execute("CREATE TABLE IF NOT EXISTS outputs (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self.hits = self.misses = 0

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        conn = self._conn()
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            rows = conn.execute(f"SELECT key, value FROM outputs WHERE key IN ({','.join('?' * len(chunk))})", chunk)
            out.update((k, json.loads(v)) for k, v in rows)
        self.hits += len(out)
        self.misses += len(set(keys) - set(out))
        return out

    def put_many(self, items: dict[str, Any]) -> None:
        if not items:
            return
        conn = self._conn()
        conn.execute("BEGIN")
        conn.executemany("INSERT OR REPLACE INTO outputs (key, value) VALUES (?, ?)",
                         [(k, json.dumps(v, ensure_ascii=False)) for k, v in items.items()])
        conn.execute("COMMIT")
