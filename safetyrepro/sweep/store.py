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
import io
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from safetyrepro.atomic import (
    TMP_SUFFIX,
    atomic_write,
    ensure_dir,
    link_refused,
    open_nofollow,
    replace_within,
)
from safetyrepro.errors import UserError
from safetyrepro.grid_schema import SET_RECORD, WRITTEN_COLUMNS, set_record_text, written_order
from safetyrepro.tasks.subsets import DEFAULT_FEWSHOT_DRAW

DONE_STATUSES = ("ok", "not_applicable")  # a cell with either is finished; "failed" is retried
MAX_SLUG = 80
# of a sweep's identity (SweepSpec.identity), what decides an item record's numbers beside each model's
# spec: records made alike serve another run whatever its other models, filters and limit (certify --records)
RECORD_KEYS = ("package", "precision", "tie_rule", "rules_sha256", "fewshot_draw")
# identity keys added after runs were recorded without them: absent means this default (SweepSpec.identity
# leaves them out at it, so a default run's sweep.json reads as before)
IDENTITY_DEFAULTS = {"fewshot_draw": DEFAULT_FEWSHOT_DRAW}


def recorded(identity: Mapping[str, Any], key: str) -> Any:
    """A key's value in a recorded identity, its default where the record leaves it out."""
    return identity.get(key, IDENTITY_DEFAULTS.get(key))


def identity_changes(stored: Mapping[str, Any], now: Mapping[str, Any], keys: Iterable[str] | None = None) -> list[str]:
    """The keys of a sweep's identity (all of `now`'s and the defaulted ones, or `keys`) whose value the
    recorded one (a sweep.json, a certify run's cost.json) holds otherwise: the one comparison that decides
    what may be resumed. A key of IDENTITY_DEFAULTS absent from either side reads as its default."""
    asked = list(now if keys is None else keys)
    asked += [k for k in IDENTITY_DEFAULTS if keys is None and k not in asked]
    return [k for k in asked if recorded(stored, k) != recorded(now, k)]


def slug(label: str) -> str:
    """A file-system-safe folder name for a model label: readable, bounded in length, and unique, since
    different labels can read alike once their odd characters are replaced (`a b` and `a_b`)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_.")[:MAX_SLUG] or "model"
    return f"{readable}-{hashlib.sha256(label.encode('utf-8')).hexdigest()[:10]}"


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
        # what was there before, so that a refusal under the lock takes back what this run made (abandon)
        self._made_from: Path | None = _first_missing(self.root)
        self._before = set() if self._made_from is not None or not self.root.is_dir() else set(os.listdir(self.root))
        ensure_dir(self.root)
        while True:
            # never through a symlink: a planted one would have us truncate the file it points to
            fd = open_nofollow(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o666, root=self.root)
            f = os.fdopen(fd, "r+")
            self._lock_file: IO[str] | None = f
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip() or "another process"
                f.close()
                self._lock_file = None
                raise UserError(
                    f"another sweep ({holder}) is writing to {self.root}; wait for it to finish or choose another --out"
                ) from None
            if _same_file(f, self.root / ".lock"):
                break
            # a refused run removed the lock file (abandon) after this process opened it: lock the new one
            f.close()
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()}")
        f.flush()
        self.check_links()
        self._remove_stale_temporaries()

    def check_links(self) -> None:
        """Refuse a symbolic link where the store reads, renames or writes: the cells folder, a
        model's folder in it, a cell file, or an output name (a link at an output name would be
        replaced, not followed, but a link here means someone expects it to stay: say so)."""
        candidates = [
            self.cells_dir,
            *(
                self.root / n
                for n in ("grid.csv", "grid.parquet", "items.parquet", SET_RECORD, "sweep.json", "run.json", "logs")
            ),
        ]
        if self.cells_dir.is_dir() and not self.cells_dir.is_symlink():
            for model_dir in self.cells_dir.iterdir():
                candidates.append(model_dir)
                if model_dir.is_dir() and not model_dir.is_symlink():
                    candidates.extend(model_dir.iterdir())
        for p in candidates:
            if p.is_symlink():
                raise link_refused(p)

    def _remove_stale_temporaries(self) -> None:
        """Half-written files of a killed run (we hold the lock). The walk never enters a linked
        folder: what it points to is not ours to delete."""
        for folder, _dirs, files in os.walk(self.root, followlinks=False):
            for name in files:
                if name.endswith(TMP_SUFFIX):
                    p = Path(folder) / name
                    if not p.is_symlink():
                        p.unlink(missing_ok=True)

    def unlock(self) -> None:
        f = getattr(self, "_lock_file", None)
        if f is not None:
            f.seek(0)
            f.truncate()  # no stale pid for the next holder's message
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()
            self._lock_file = None

    def abandon(self) -> None:
        """After a refusal under the lock (Ray unreachable, the cache disk full, an interrupt before any
        cell): take back what this run made where it kept no work, so that the refused command leaves no
        lock file, no sweep.json of settings nothing was computed under, no empty folder, and no --out it
        created; then unlock. Cell files, and whatever the folder held before, are kept."""
        if getattr(self, "_lock_file", None) is None:
            return
        made = set(os.listdir(self.root)) - self._before
        if not self.has_cells():
            for name in sorted(made - {".lock"}):
                p = self.root / name
                if p.is_symlink():
                    continue
                if name == "sweep.json" and p.is_file():
                    p.unlink()
                elif p.is_dir():
                    _remove_empty_folders(p)
        if ".lock" in made:  # removed while held: a process that opened it before locks the new one (lock)
            (self.root / ".lock").unlink(missing_ok=True)
        self.unlock()
        if self._made_from is not None:  # the folders this run created, from --out up, where empty
            for folder in (self.root, *self.root.parents):
                try:
                    folder.rmdir()
                except OSError:
                    break
                if folder == self._made_from:
                    break

    def check_identity(self, identity: dict[str, Any], allow_rules_change: bool) -> dict[str, Any] | None:
        """Compare with a sweep already in the directory (before anything is written); returns the
        stored identity, or None for a fresh directory."""
        path = self.root / "sweep.json"
        if self.root.exists() and not self.root.is_dir():
            raise UserError(f"--out {self.root} is a file, not a folder; choose another --out")
        if not path.exists():
            if self.root.exists() and (self.root / "grid.csv").exists():
                raise UserError(
                    f"{self.root} holds a grid that no SafetyRepro sweep recorded (no sweep.json); choose another --out"
                )
            return None
        try:
            stored = json.loads(path.read_text())
            if not isinstance(stored, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as e:
            raise UserError(
                f"{path} is damaged ({e}); it records the sweep's settings: move it aside (mv {path} "
                f"{path}.damaged) and rerun the sweep's own command"
            ) from None
        if not self.has_cells():  # nothing was computed under those settings: a new start may replace them
            return None
        changed = identity_changes(stored, identity)
        if "rules_sha256" in changed and not allow_rules_change:
            raise UserError(
                f"{self.root} holds a sweep made under other rules (sha256 {stored.get('rules_sha256', '?')[:12]}, "
                f"now {identity['rules_sha256'][:12]}); pass --allow-rules-change to continue it under the new rules"
            )
        diffs = [k for k in changed if k != "rules_sha256"]
        if diffs:
            k = diffs[0]
            raise UserError(
                f"{self.root} holds a sweep with other settings ({k}: {recorded(stored, k)!r}, "
                f"now {recorded(identity, k)!r}); rerun with the same settings to resume, or choose another --out"
            )
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
            raise UserError(
                f"{path} is damaged ({e}); move it aside (mv {path} {path}.damaged) and rerun: the "
                "sweep writes it anew from its cells (the models of earlier runs are recorded again "
                "when they run)"
            ) from None

    def write_identity(self, identity: dict[str, Any], previous: dict[str, Any] | None) -> None:
        record = dict(identity)
        history = (previous or {}).get("rules_history", [])
        if previous and previous.get("rules_sha256") != identity["rules_sha256"]:
            history = [*history, previous["rules_sha256"]]
        if history:
            record["rules_history"] = history
        atomic_write(self.root / "sweep.json", json.dumps(record, indent=2), root=self.root)

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
            if (
                isinstance(record, dict)
                and isinstance(record.get("key"), str)
                and "status" in record
                and (record["status"] not in DONE_STATUSES or isinstance(record.get("row"), dict))
            ):
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
        replace_within(path, aside, self.root)
        sys.stderr.write(
            f"safetyrepro: warning: cell file {path} was {problem}; set aside as {aside.name}, the cell is recomputed\n"
        )
        return None

    def commit(self, model: str, file_stem: str, record: dict) -> None:
        atomic_write(self.cell_path(model, file_stem), json.dumps(record, ensure_ascii=False), root=self.root)

    def records(self) -> list[dict]:
        self.check_links()
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
        """grid.csv (+ Parquet) in plan order and items.parquet, each replaced atomically, after the set's
        record (grid_schema.SET_RECORD) that names them: a kill between two of them leaves a set every
        reader refuses, never a mix read as one."""
        import pandas as pd

        rank = {k: i for i, k in enumerate(order)}
        done = sorted(
            (r for r in records if r.get("status") in DONE_STATUSES and r["key"] in rank), key=lambda r: rank[r["key"]]
        )
        ok = [r for r in done if r["status"] == "ok"]
        grid = pd.DataFrame([{**r["row"], "status": r["status"]} for r in done])
        grid = pd.DataFrame(columns=list(WRITTEN_COLUMNS)) if grid.empty else grid[written_order(grid.columns)]
        items = pd.DataFrame(
            [
                {
                    "model": r["row"]["model"],
                    "config_id": r["row"]["config_id"],
                    "benchmark": r["row"]["benchmark"],
                    "package": r["row"]["package"],
                    "precision": r["row"]["precision"],
                    **it,
                }
                for r in ok
                for it in r["items"]
            ]
        )
        members = {
            "grid.csv": grid.to_csv(index=False).encode("utf-8"),
            "grid.parquet": parquet_bytes(grid),
            "items.parquet": parquet_bytes(items),
        }
        atomic_write(self.root / SET_RECORD, set_record_text(members), root=self.root)
        for name, data in members.items():
            atomic_write(self.root / name, data, root=self.root)
        return {
            "grid": self.root / "grid.csv",
            "grid_parquet": self.root / "grid.parquet",
            "items": self.root / "items.parquet",
        }


def _first_missing(path: Path) -> Path | None:
    """The topmost folder of `path` (itself included) that does not exist yet, or None when it exists."""
    missing = None
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            break
        missing = p
    return missing


def _same_file(f: IO[str], path: Path) -> bool:
    """Whether the open file `f` is still the file at `path` (not unlinked or replaced since it was opened)."""
    try:
        here, there = os.fstat(f.fileno()), os.lstat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _remove_empty_folders(folder: Path) -> None:
    """Remove `folder` and the folders in it where they hold no file (a link is kept, and so what holds it)."""
    for sub, _dirs, files in os.walk(folder, topdown=False, followlinks=False):
        if not files:
            try:
                os.rmdir(sub)
            except OSError:
                pass


def parquet_bytes(frame) -> bytes:
    """A table as Parquet bytes, zstd-compressed as the importers write theirs (about half of snappy's size: the
    certified study's 66,573 records are 1.2 MB rather than 2.2 MB)."""
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False, compression="zstd")
    return buffer.getvalue()
