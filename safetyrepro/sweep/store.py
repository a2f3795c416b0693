"""The sweep's result store: one file per finished cell, committed atomically, and the outputs
assembled from those files (grid.csv / grid.parquet, items.parquet).

A cell file is written to a temporary name and renamed into place, so a crash at any moment leaves
either the whole cell or nothing; a resumed sweep skips the cells whose files exist. One sweep at a
time may write a directory (an exclusive lock on DIR/.lock, released by the OS when the process dies,
SIGKILL included). DIR/sweep.json records what decides the numbers (rules hash, models, limit, ...);
a sweep with other settings is refused.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetyrepro.errors import UserError

GRID_COLUMNS = ["model", "benchmark", "template", "decoding", "shots", "scoring", "precision", "package",
                "n_items", "n_seeds", "score", "parse_rate", "tier", "config_id", "status"]
DONE_STATUSES = ("ok", "not_applicable")  # a cell with either is finished; "failed" is retried
MAX_SLUG = 80


def slug(label: str) -> str:
    """A file-system-safe folder name for a model label: readable, bounded in length, and unique, since
    different labels can read alike once their odd characters are replaced (`a b` and `a_b`)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_.")[:MAX_SLUG] or "model"
    return f"{readable}-{hashlib.sha256(label.encode('utf-8')).hexdigest()[:10]}"


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f.name, path)


@dataclass
class Store:
    root: Path

    @property
    def cells_dir(self) -> Path:
        return self.root / "cells"

    def cell_path(self, model: str, file_stem: str) -> Path:
        return self.cells_dir / slug(model) / f"{file_stem}.json"

    # -- locking and identity -----------------------------------------------------------------
    def lock(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.root / ".lock", "a+")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.seek(0)
            holder = self._lock_file.read().strip() or "another process"
            raise UserError(f"another sweep ({holder}) is writing to {self.root}; wait for it to finish "
                            "or choose another --out") from None
        self._lock_file.seek(0)
        self._lock_file.truncate()
        self._lock_file.write(f"pid {os.getpid()}")
        self._lock_file.flush()
        for stale in self.root.rglob("*.tmp"):  # half-written files of a killed run; we hold the lock
            stale.unlink(missing_ok=True)

    def unlock(self) -> None:
        f = getattr(self, "_lock_file", None)
        if f is not None:
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()
            self._lock_file = None

    def check_identity(self, identity: dict[str, Any], allow_rules_change: bool) -> dict[str, Any] | None:
        """Compare with a sweep already in the directory (before anything is written); returns the
        stored identity, or None for a fresh directory."""
        path = self.root / "sweep.json"
        if not path.exists():
            if self.root.exists() and (self.root / "grid.csv").exists():
                raise UserError(f"{self.root} holds a grid that no SafetyRepro sweep recorded (no sweep.json); "
                                "choose another --out")
            return None
        try:
            stored = json.loads(path.read_text())
        except ValueError:
            raise UserError(f"{path} is not valid JSON; choose another --out or remove the directory") from None
        if stored.get("rules_sha256") != identity["rules_sha256"] and not allow_rules_change:
            raise UserError(
                f"{self.root} holds a sweep made under other rules (sha256 {stored.get('rules_sha256', '?')[:12]}, "
                f"now {identity['rules_sha256'][:12]}); pass --allow-rules-change to continue it under the new rules")
        diffs = [k for k in identity if k != "rules_sha256" and stored.get(k) != identity[k]]
        if diffs:
            k = diffs[0]
            raise UserError(f"{self.root} holds a sweep with other settings ({k}: {stored.get(k)!r}, "
                            f"now {identity[k]!r}); rerun with the same settings to resume, or choose another --out")
        return stored

    def write_identity(self, identity: dict[str, Any], previous: dict[str, Any] | None) -> None:
        record = dict(identity)
        history = (previous or {}).get("rules_history", [])
        if previous and previous.get("rules_sha256") != identity["rules_sha256"]:
            history = [*history, previous["rules_sha256"]]
        if history:
            record["rules_history"] = history
        atomic_write(self.root / "sweep.json", json.dumps(record, indent=2))

    # -- cells --------------------------------------------------------------------------------
    def done(self, model: str, file_stem: str, key: str | None = None) -> dict | None:
        """The finished record of a cell (ok or not applicable), or None. With `key`, a record stored
        under another key (another model or configuration) does not count."""
        path = self.cell_path(model, file_stem)
        if not path.exists():
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
        if key is not None and record.get("key") != key:
            return None
        return record if record.get("status") in DONE_STATUSES else None

    def commit(self, model: str, file_stem: str, record: dict) -> None:
        atomic_write(self.cell_path(model, file_stem), json.dumps(record, ensure_ascii=False))

    def records(self) -> list[dict]:
        out = []
        for p in sorted(self.cells_dir.glob("*/*.json")):
            out.append(json.loads(p.read_text(encoding="utf-8")))
        return out

    # -- assembled outputs --------------------------------------------------------------------
    def write_outputs(self, records: list[dict], order: list[str]) -> dict[str, Path]:
        """grid.csv (+ Parquet) in plan order and items.parquet, each replaced atomically."""
        import pandas as pd

        rank = {k: i for i, k in enumerate(order)}
        done = sorted((r for r in records if r.get("status") in DONE_STATUSES and r["key"] in rank),
                      key=lambda r: rank[r["key"]])
        ok = [r for r in done if r["status"] == "ok"]
        grid = pd.DataFrame([{**r["row"], "status": r["status"]} for r in done])
        if grid.empty:
            grid = pd.DataFrame(columns=GRID_COLUMNS)
        extra = [c for c in grid.columns if c not in GRID_COLUMNS]
        grid = grid[GRID_COLUMNS + extra]
        paths = {"grid": self.root / "grid.csv", "grid_parquet": self.root / "grid.parquet",
                 "items": self.root / "items.parquet"}
        atomic_write(paths["grid"], grid.to_csv(index=False))
        _atomic_parquet(grid, paths["grid_parquet"])
        items = pd.DataFrame([
            {"model": r["row"]["model"], "config_id": r["row"]["config_id"], "benchmark": r["row"]["benchmark"],
             "package": r["row"]["package"], "precision": r["row"]["precision"], **it}
            for r in ok for it in r["items"]
        ])
        _atomic_parquet(items, paths["items"])
        return paths


def _atomic_parquet(df, path: Path) -> None:
    tmp = path.with_suffix(".parquet.tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)
