"""Import end to end: check the output folder, read the runs, assemble, write every file
atomically (whole or not at all, never through a link), and only after everything was validated."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from safetyrepro.atomic import atomic_write, check_no_links
from safetyrepro.errors import UserError

from .assemble import Imported, assemble
from .mapping import load_mapping

PACKAGES = ("lm-eval", "inspect")
OUTPUTS = ("grid.csv", "grid.parquet", "items.parquet", "rules.yaml", "run.json", "provenance.csv", "unmapped.csv",
           "duplicates.csv", "disagreements.csv", "bad_inputs.csv")


def check_out(out: Path) -> None:
    """Refuse a folder that holds something other than an earlier import: its files would be replaced."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder; choose another --out")
    if not out.is_dir():
        return
    if (out / "sweep.json").exists() or (out / "cells").exists():
        raise UserError(f"--out {out} holds a sweep (sweep.json, cells/); an import would replace its grid: "
                        "choose another --out")
    if (out / "grid.csv").exists():
        try:
            source = json.loads((out / "run.json").read_text()).get("source", "")
        except (OSError, ValueError, AttributeError):
            source = ""
        if not str(source).startswith("safetyrepro import"):
            raise UserError(f"--out {out} holds a grid that no `safetyrepro import` wrote; choose another --out")
    check_no_links(out, *(out / name for name in OUTPUTS))


def _sha256_file(path: str) -> tuple[str, int]:
    from safetyrepro.tasks.sources import sha256_file

    try:
        return sha256_file(Path(path)), Path(path).stat().st_size
    except OSError:
        return "", 0


def import_runs(package: str, paths: Sequence[str], *, metric: str | None = None, mapping_path: str | None = None,
                duplicates: str = "newest", skip_bad: bool = False) -> Imported:
    """Read and assemble, writing nothing (the Python entry point for notebooks, and the CLI's)."""
    from safetyrepro.tasks.envelope import RULES_PATH, parse_rules

    if package not in PACKAGES:
        raise UserError(f"unknown package {package!r}; allowed: {', '.join(PACKAGES)}")
    mapping = load_mapping(mapping_path)
    packaged_text = RULES_PATH.read_bytes()
    rules = parse_rules(packaged_text, str(RULES_PATH))
    if package == "lm-eval":
        from .lm_eval_runs import read_paths
    else:
        from .inspect_logs import read_paths
    reading = read_paths(list(paths), mapping, rules, metric=metric, skip_bad=skip_bad)
    extra = []
    if mapping.path:
        size = len(Path(mapping.path).read_bytes())
        extra.append({"path": mapping.path, "kind": "mapping file", "sha256": mapping.sha256, "bytes": size,
                      "status": "used", "cells": ""})
    for b in reading.bad:
        sha, size = _sha256_file(b.path)
        extra.append({"path": b.path, "kind": f"{package} input", "sha256": sha, "bytes": size,
                      "status": f"bad: {b.reason}", "cells": ""})
    return assemble(reading, duplicates, mapping, packaged_text, extra)


def write_outputs(out: Path, imported: Imported) -> list[Path]:
    """Every output file, each written atomically; the grid last, so a folder with a new grid.csv
    has every file of the same import beside it."""
    written = []

    def put(name: str, data) -> None:
        written.append(atomic_write(out / name, data, root=out))

    put("rules.yaml", imported.rules_text)
    put("run.json", json.dumps(imported.run_record, indent=2, sort_keys=False, default=str) + "\n")
    for name, table in imported.tables().items():
        put(name, table.to_csv(index=False))
    items = imported.items
    if len(items):
        put("items.parquet", lambda f: items.to_parquet(f, index=False, compression="zstd"))
    elif (out / "items.parquet").is_file():
        # an earlier import's records would be read beside this grid; none were logged this time (and
        # analyze stops on an empty items.parquet, so an empty one is no substitute)
        os.unlink(out / "items.parquet")
    grid = imported.grid
    put("grid.parquet", lambda f: grid.to_parquet(f, index=False, compression="zstd"))
    put("grid.csv", grid.to_csv(index=False))
    return written
