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
import sys
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


def _umask_mode(mode: int = 0o666) -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mode & ~mask


def atomic_write(path: Path, text: str) -> None:
    """Write a whole file or nothing: a temporary file in the same folder, fsynced, renamed into place
    (with the mode a plain open() would give, not the temporary file's 0600); on any error the
    temporary file is removed and the old file, if any, is untouched."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp", encoding="utf-8")
    try:
        with f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(f.name, _umask_mode())
        os.replace(f.name, path)
    except BaseException:
        Path(f.name).unlink(missing_ok=True)
        raise


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
        path = self.root / ".lock"
        try:  # never through a symlink: a planted one would have us truncate the file it points to
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
        except OSError:
            if path.is_symlink():
                raise UserError(f"{path} is a symbolic link; SafetyRepro does not write through links in its "
                                "output folder: remove it and rerun") from None
            raise
        self._lock_file = os.fdopen(fd, "r+")
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
            f.seek(0)
            f.truncate()  # no stale pid for the next holder's message
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()
            self._lock_file = None

    def check_identity(self, identity: dict[str, Any], allow_rules_change: bool) -> dict[str, Any] | None:
        """Compare with a sweep already in the directory (before anything is written); returns the
        stored identity, or None for a fresh directory."""
        path = self.root / "sweep.json"
        if self.root.exists() and not self.root.is_dir():
            raise UserError(f"--out {self.root} is a file, not a folder; choose another --out")
        if not path.exists():
            if self.root.exists() and (self.root / "grid.csv").exists():
                raise UserError(f"{self.root} holds a grid that no SafetyRepro sweep recorded (no sweep.json); "
                                "choose another --out")
            return None
        try:
            stored = json.loads(path.read_text())
            if not isinstance(stored, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as e:
            raise UserError(f"{path} is damaged ({e}); it records the sweep's settings: move it aside (mv {path} "
                            f"{path}.damaged) and rerun the sweep's own command") from None
        if not self.has_cells():  # nothing was computed under those settings: a new start may replace them
            return None
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

    def check_run_record(self) -> None:
        """run.json, if there, must be readable: the sweep adds to it."""
        path = self.root / "run.json"
        if not path.is_file():
            return
        try:
            if not isinstance(json.loads(path.read_text()), dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as e:
            raise UserError(f"{path} is damaged ({e}); move it aside (mv {path} {path}.damaged) and rerun: the "
                            "sweep writes it anew from its cells (the models of earlier runs are recorded again "
                            "when they run)") from None

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
        under another key (another model or configuration) does not count. A damaged file is set
        aside (see `_read_cell`) and its cell counts as not done."""
        path = self.cell_path(model, file_stem)
        if not path.exists():
            return None
        record = self._read_cell(path)
        if record is None or (key is not None and record.get("key") != key):
            return None
        return record if record.get("status") in DONE_STATUSES else None

    def _read_cell(self, path: Path) -> dict | None:
        """A cell file's record; a file that is not a whole record (truncated, edited, zero bytes) is
        renamed to `<name>.damaged-<n>` beside it, never deleted, and said so on stderr: its cell is
        recomputed."""
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(record, dict) and isinstance(record.get("key"), str) and "status" in record and (
                    record["status"] not in DONE_STATUSES or isinstance(record.get("row"), dict)):
                return record
            problem = "not a cell record"
        except UnicodeDecodeError:
            problem = "not UTF-8 text"
        except ValueError as e:
            problem = f"not valid JSON ({e})"
        n = 1
        while path.with_name(f"{path.name}.damaged-{n}").exists():
            n += 1
        aside = path.with_name(f"{path.name}.damaged-{n}")
        os.replace(path, aside)
        sys.stderr.write(f"safetyrepro: warning: cell file {path} was {problem}; set aside as {aside.name}, "
                         "the cell is recomputed\n")
        return None

    def commit(self, model: str, file_stem: str, record: dict) -> None:
        atomic_write(self.cell_path(model, file_stem), json.dumps(record, ensure_ascii=False))

    def records(self) -> list[dict]:
        out = []
        for p in sorted(self.cells_dir.glob("*/*.json")):
            record = self._read_cell(p)
            if record is not None:
                out.append(record)
        return out

    def has_cells(self) -> bool:
        return self.cells_dir.is_dir() and any(self.cells_dir.glob("*/*.json"))

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
    try:
        df.to_parquet(tmp, index=False)
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
