"""A content-addressed cache of model outputs, shared by every sweep on the machine.

Key: the weights' content hash, precision, the exact model input text, and everything that decides
the output (kind, continuation or decoding settings, seed). A hit returns exactly what the model
returned the first time, so a cached rerun is bit-identical and does no model work. SQLite in WAL
mode lets several processes (Ray workers, a resumed sweep) share it safely.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

from safetyrepro.errors import UserError

try:
    import resource
except ImportError:  # not on POSIX: no file-size limit to name
    resource = None  # type: ignore[assignment]  # the module or None: callers check

SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
FULL_BELOW_BYTES = 8 << 20  # a file system with less free space than this is full, for the messages below
BUSY_TIMEOUT_S = 60.0  # how long a write waits for another process's write to the shared cache


def file_size_limit() -> int | None:
    """The soft limit on the size of a file this process may write (`ulimit -f`), or None when unlimited."""
    if resource is None:  # not on POSIX
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


class OutputsCacheError(UserError):
    """The outputs cache cannot be read or written: the sweep stops (its finished cells are kept)."""


def cache_key(**fields: Any) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class OutputsCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._local = threading.local()
        self.hits = self.misses = 0
        for p in (self.path, *(self.path.with_name(self.path.name + s) for s in SQLITE_SIDE_FILES)):
            if p.is_symlink():  # SQLite would follow it and write into the file it points to
                raise OutputsCacheError(
                    f"the outputs cache {p} is a symbolic link; SafetyRepro does not write "
                    "through links in its cache: remove the link and rerun"
                ) from None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._conn() as c:
                c.execute("CREATE TABLE IF NOT EXISTS outputs (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                # which (model, configuration, item) a sweep or certify run evaluated through this cache: the
                # outputs' keys are hashes, so without it no later run could tell a cell's records were seen
                # (certify's --selection, issue 53)
                c.execute(
                    "CREATE TABLE IF NOT EXISTS cells (model TEXT NOT NULL, config_id TEXT NOT NULL, "
                    "item_id TEXT NOT NULL, PRIMARY KEY (model, config_id, item_id))"
                )
        except (sqlite3.Error, OSError) as e:
            raise self._error(e) from None

    def _error(self, e: BaseException) -> OutputsCacheError:
        text = str(e).strip() or type(e).__name__
        low = text.lower()
        if "locked" in low or "busy" in low:
            fix = (
                "another process holds it (a sweep or test using the same cache): wait for it to finish and "
                "rerun, or give this run its own cache with $SAFETYREPRO_CACHE_DIR; the file is not damaged"
            )
        elif "full" in low or "no space" in low or self._disk_full():
            # a full file system also shows as "disk I/O error" or "unable to open" (no room for the WAL)
            fix = "free disk space and rerun (finished cells are kept; the file is not damaged)"
        elif (limit := file_size_limit()) is not None and ("i/o" in low or "too large" in low):
            # `ulimit -f`: the write fails with EFBIG, which SQLite reports as a disk I/O error
            fix = (
                "raise the limit (ulimit -f unlimited) or free the cache folder and rerun (finished cells are "
                "kept; the file is not damaged)"
            )
            text = f"the process's file-size limit ({limit:,} bytes, ulimit -f) was reached writing it: {text}"
        elif "disk i/o" in low:
            fix = "check the disk and its free space, then rerun (finished cells are kept)"
        elif "not a database" in low or "malformed" in low or "corrupt" in low:
            fix = f"move it aside (mv {self.path} {self.path}.damaged) and rerun: it only saves model work"
        elif "readonly" in low or "read-only" in low or "permission" in low or "unable to open" in low:
            fix = "make it writable, or point $SAFETYREPRO_CACHE_DIR at a writable folder"
        else:
            fix = f"move it aside (mv {self.path} {self.path}.damaged) and rerun"
        return OutputsCacheError(f"the outputs cache {self.path} failed ({text}); {fix}")

    def _disk_full(self) -> bool:
        """Whether the file system holding the cache has (almost) no space left."""
        folder = self.path.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        try:
            return shutil.disk_usage(folder).free < FULL_BELOW_BYTES
        except OSError:
            return False

    def check(self) -> None:
        """Readable, intact and writable, before any model loads (a quick integrity check and a write
        transaction that is rolled back)."""
        try:
            conn = self._conn()
            bad = conn.execute("PRAGMA quick_check").fetchone()
            if bad and bad[0] != "ok":
                raise sqlite3.DatabaseError(f"database disk image is malformed ({bad[0]})")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        except sqlite3.Error as e:
            raise self._error(e) from None

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        try:
            conn = self._conn()
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                rows = conn.execute(
                    f"SELECT key, value FROM outputs WHERE key IN ({','.join('?' * len(chunk))})", chunk
                )
                out.update((k, json.loads(v)) for k, v in rows)
        except sqlite3.Error as e:
            raise self._error(e) from None
        self.hits += len(out)
        self.misses += len(set(keys) - set(out))
        return out

    def put_many(self, items: dict[str, Any]) -> None:
        if not items:
            return
        conn = self._conn()
        try:
            conn.execute("BEGIN")
            conn.executemany(
                "INSERT OR REPLACE INTO outputs (key, value) VALUES (?, ?)",
                [(k, json.dumps(v, ensure_ascii=False)) for k, v in items.items()],
            )
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise self._error(e) from None

    def note_items(self, model: str, config_id: str, item_ids) -> None:
        """Record that `model` (its label) ran `config_id` on `item_ids` through this cache."""
        rows = [(str(model), str(config_id), str(i)) for i in item_ids]
        if not rows:
            return
        conn = self._conn()
        try:
            conn.execute("BEGIN")
            conn.executemany("INSERT OR IGNORE INTO cells (model, config_id, item_id) VALUES (?, ?, ?)", rows)
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise self._error(e) from None

    def items_noted(self, model: str, config_id: str) -> set[str]:
        """The items `model` ran `config_id` on through this cache (note_items), by any sweep or certify run."""
        try:
            rows = self._conn().execute(
                "SELECT item_id FROM cells WHERE model = ? AND config_id = ?", (str(model), str(config_id))
            )
            return {str(r[0]) for r in rows}
        except sqlite3.Error as e:
            raise self._error(e) from None
