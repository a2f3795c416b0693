"""The grid's format in one place: its columns, a row, a cell's file stem.

A grid (docs/formats.md) has one row per cell, (model, configuration): `sweep` writes it, `import`
assembles it from lm-eval folders, Inspect logs and EEE records, `analyze` reads it, and a person may
write one by hand. Each of them takes the columns from here, so a column added, renamed or reordered
changes them all at once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from safetyrepro.errors import UserError
from safetyrepro.hashing import sha256_bytes, sha256_file

# The contract columns (docs/formats.md): what `analyze` requires of any grid, in the order sweep and import write them.
GRID_COLUMNS = (
    "model",
    "benchmark",
    "template",
    "decoding",
    "shots",
    "scoring",
    "precision",
    "package",
    "n_items",
    "n_seeds",
    "score",
    "parse_rate",
    "tier",
    "config_id",
)
# Optional columns the analysis reads when present:
#   status    ok (default when absent or blank) | failed | not_applicable; only ok rows are analysed
#   tie_rate  share of logprob items whose top candidates tie exactly (NaN for free-form)
STATUS = "status"
OK = "ok"
STATUSES = (OK, "failed", "not_applicable")
TIE_RATE = "tie_rate"
OPTIONAL_COLUMNS = (STATUS, TIE_RATE)
# What sweep and import write first; their own extra columns follow.
WRITTEN_COLUMNS = (*GRID_COLUMNS, STATUS)


def grid_row(
    model: str,
    config,
    precision: str,
    package: str,
    n_items: int,
    n_seeds: int,
    score: float | None,
    parse_rate: float | None,
    tier: str | None,
    config_id: str,
    status: str | None = OK,
    **extra,
) -> dict:
    """One grid row: `config` carries the axes (benchmark, template, decoding, shots, scoring); `extra`
    columns follow the written ones, in the order given. status None leaves the column to the writer
    (a sweep's cell file keeps its status beside the row)."""
    row = {
        "model": model,
        "benchmark": config.benchmark,
        "template": config.template,
        "decoding": config.decoding,
        "shots": config.shots,
        "scoring": config.scoring,
        "precision": precision,
        "package": package,
        "n_items": n_items,
        "n_seeds": n_seeds,
        "score": score,
        "parse_rate": parse_rate,
        "tier": tier,
        "config_id": config_id,
    }
    if status is not None:
        row[STATUS] = status
    return {**row, **extra}


def written_order(columns) -> list[str]:
    """The written columns first, then the others in their order."""
    columns = list(columns)
    return [*WRITTEN_COLUMNS, *(c for c in columns if c not in WRITTEN_COLUMNS)]


def cell_stem(config_id: str) -> str:
    """A configuration's file and folder name inside a model's folder (cells/, logs/):
    `bbq__T1__greedy__0shot__logprob`."""
    return config_id.replace("/", "__")


# -- the sweep's output set ------------------------------------------------------------------------
# A sweep rewrites grid.csv, grid.parquet and items.parquet one after another, so a kill between two of
# them would leave files of two states side by side. SET_RECORD, written before them, names the sha256 of
# each member as this write makes it: after a kill at any point the record and the members agree (all
# earlier or all new) or disagree, and every reader (analysis/grid_io.read_table, which every command
# reads grids and items through) refuses a disagreeing set. A grid without the record (written by hand,
# or before records) is read as it is.
SET_RECORD = "grid_set.json"
SET_MEMBERS = ("grid.csv", "grid.parquet", "items.parquet")
SET_FORMAT = 1


def set_record_text(members: dict[str, bytes]) -> str:
    """SET_RECORD's text for the members' bytes about to be written."""
    return (
        json.dumps(
            {
                "safetyrepro_set": SET_FORMAT,
                "note": "written by `safetyrepro sweep` before the files below; a reader refuses the folder when "
                "one of them is not the file recorded here (rerun the sweep's command to rewrite them together)",
                "files": {name: {"sha256": sha256_bytes(data), "bytes": len(data)} for name, data in members.items()},
            },
            indent=1,
        )
        + "\n"
    )


_checked: dict[tuple, None] = {}  # sets found whole, by their members' (name, size, mtime): hashed once


def check_set(path: Path | str) -> None:
    """Refuse (UserError, one line) to read `path` when it is a member of a sweep's output set whose
    members disagree with the set's record (see SET_RECORD); nothing to check without a record."""
    path = Path(path)
    folder = path.parent
    record_path = folder / SET_RECORD
    if path.name not in SET_MEMBERS or not record_path.is_file():
        return
    heal = (
        f"rerun the sweep's command with --out {folder} to rewrite them together (no model work for cells already done)"
    )
    try:
        record = json.loads(record_path.read_bytes()[: 1 << 20])
        files = record["files"]
        wanted = {str(n): str(files[n]["sha256"]) for n in files if n in SET_MEMBERS}
    except (OSError, ValueError, TypeError, KeyError):
        raise UserError(
            f"{record_path} is damaged, so grid.csv, grid.parquet and items.parquet in {folder} cannot be "
            f"checked as one set: {heal}"
        ) from None
    stats: list[tuple[str, int | None, int | None, int | None]] = []
    for name in sorted(wanted):
        try:
            st = os.stat(folder / name)
            stats.append((name, st.st_size, st.st_mtime_ns, st.st_ino))
        except OSError:
            stats.append((name, None, None, None))
    key = (str(folder.resolve()), tuple(stats))
    if key in _checked:
        return
    for name, size, _, _ in stats:
        if size is None or size != files[name].get("bytes") or sha256_file(folder / name) != wanted[name]:
            what = "is missing" if size is None else f"is not the file {SET_RECORD} records"
            raise UserError(
                f"{folder}: {', '.join(sorted(wanted))} are not one set ({name} {what}: a sweep stopped while "
                f"writing them, or a file was replaced by hand): {heal}"
            )
    _checked[key] = None
