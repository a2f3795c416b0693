"""Measured seconds of a sweep's cells, read from its cell files (cells/<model-slug>/<stem>.json[.gz]):
what `plan GRID` and `certify replay` scale their wall-time estimates by."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def read_cell(path: Path) -> dict | None:
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):  # a damaged cell file costs its timing, not the plan
        return None
    return record if isinstance(record, dict) else None


def cell_seconds_per_item(folder: Path) -> dict[tuple[str, str], float]:
    """(model, config_id) -> elapsed seconds per item of each ok cell of a sweep folder's cell files
    (cells/<model-slug>/<stem>.json[.gz])."""
    found: dict[tuple[str, str], float] = {}
    for path in sorted([*folder.glob("cells/*/*.json"), *folder.glob("cells/*/*.json.gz")]):
        record = read_cell(path) or {}
        row = record.get("row")
        if not isinstance(row, dict) or record.get("status", "ok") != "ok":
            continue
        elapsed, n = record.get("elapsed_s"), row.get("n_items")
        if isinstance(elapsed, (int, float)) and isinstance(n, (int, float)) and n > 0 and elapsed >= 0:
            found[(str(row.get("model")), str(row.get("config_id")))] = float(elapsed) / float(n)
    return found


def seconds_per_item(folder: Path, cells: set[tuple[str, str]]) -> dict[str, tuple[float, int, int]]:
    """benchmark -> (seconds per item, summed over the benchmark's cells, cells timed, cells in the grid),
    from the sweep's cell files cells/<model-slug>/<stem>.json[.gz]: elapsed_s / n_items of each ok cell
    of the grid. Where some cells lack a file the sum is scaled up by cells / timed."""
    from safetyrepro.tasks.envelope import benchmark_of

    found = {k: v for k, v in cell_seconds_per_item(folder).items() if k in cells}
    out = {}
    for benchmark in sorted({benchmark_of(cid) for _, cid in cells}):
        mine = [k for k in cells if benchmark_of(k[1]) == benchmark]
        timed = [found[k] for k in mine if k in found]
        if timed:
            out[benchmark] = (sum(timed) * len(mine) / len(timed), len(timed), len(mine))
    return out
