"""Writing an import: what it writes (`Imported`, assembled by importers/assemble.py), the output folder
checked first, and only after everything was read and validated (importers/run.py) the whole set,
staged beside the folder and swapped in at once, never through a link."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from safetyrepro.atomic import atomic_write, check_no_links, check_output_set, read_marker, staged_output
from safetyrepro.errors import UserError

TABLES = ("provenance.csv", "unmapped.csv", "duplicates.csv", "disagreements.csv", "bad_inputs.csv")
OUTPUTS = ("grid.csv", "grid.parquet", "items.parquet", "rules.yaml", "run.json", *TABLES)


@dataclass
class Imported:
    """What `safetyrepro import` writes, before it is written."""

    grid: pd.DataFrame
    items: pd.DataFrame
    provenance: pd.DataFrame
    unmapped: pd.DataFrame
    duplicates: pd.DataFrame
    disagreements: pd.DataFrame
    bad: pd.DataFrame
    rules_text: bytes
    run_record: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def write(self, out) -> list:
        """Write every file `safetyrepro import --out` writes into `out` (refused where the CLI refuses)."""
        check_out(Path(out))
        return write_outputs(Path(out), self)


def legacy_import(folder: Path, files: list[str]) -> set[str] | None:
    """An import written before folders carried a marker: its run.json says `safetyrepro import`; then
    only the names an import writes are its own."""
    try:
        source = json.loads((folder / "run.json").read_text()).get("source", "")
    except (OSError, ValueError, AttributeError):
        return None
    if not ("grid.csv" in files and str(source).startswith("safetyrepro import")):
        return None
    return {f for f in files if f in OUTPUTS}


def _legacy_analysis(folder: Path) -> bool:
    """DIR/analysis written by `analyze` before markers (kept in place, as a marked one is)."""
    try:
        card = json.loads((folder / "grid_card.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(card, dict) and "analysis_packages" in card


def check_out(out: Path) -> None:
    """Refuse a folder that holds something other than an earlier import (recognised by the marker
    .safetyrepro-output.json, or run.json of an import written before markers): an import replaces
    the folder as a whole. Another command's output folder inside it (DIR/analysis) is kept."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder; choose another --out")
    if not out.is_dir():
        return
    check_no_links(out, *(out / name for name in OUTPUTS))
    if (out / "sweep.json").exists() or (out / "cells").exists():
        raise UserError(
            f"--out {out} holds a sweep (sweep.json, cells/); an import would replace its grid: choose another --out"
        )
    if (out / "grid.csv").exists() and read_marker(out) is None and legacy_import(out, ["grid.csv"]) is None:
        raise UserError(f"--out {out} holds a grid that no `safetyrepro import` wrote; choose another --out")
    check_output_set(out, "import", legacy=legacy_import, carry=_legacy_analysis)


def output_files(imported: Imported) -> dict[str, Any]:
    """What an import writes, by file name, in writing order (grid.csv last), as atomic_write takes it: for
    `write_outputs` and for `sweep --task`, which writes them beside the runs it read."""
    files: dict[str, Any] = {
        "rules.yaml": imported.rules_text,
        "run.json": json.dumps(imported.run_record, indent=2, sort_keys=False, default=str) + "\n",
    }
    tables = (imported.provenance, imported.unmapped, imported.duplicates, imported.disagreements, imported.bad)
    files.update({name: table.to_csv(index=False) for name, table in zip(TABLES, tables, strict=True)})
    items, grid = imported.items, imported.grid
    if len(items):  # none logged: no items.parquet (analyze stops on an empty one)
        files["items.parquet"] = lambda f: items.to_parquet(f, index=False, compression="zstd")
    files["grid.parquet"] = lambda f: grid.to_parquet(f, index=False, compression="zstd")
    files["grid.csv"] = grid.to_csv(index=False)
    return files


def write_outputs(out: Path, imported: Imported) -> list[Path]:
    """Every output file, built in a staging folder beside `out` that then takes its place in one step
    (safetyrepro/atomic.py `staged_output`): `out` holds the earlier import or this one, never a mix."""
    written = []
    with staged_output(out, "import", legacy=legacy_import, carry=_legacy_analysis) as stage:
        for name, data in output_files(imported).items():
            atomic_write(stage / name, data, root=stage)
            written.append(out / name)
    return written
