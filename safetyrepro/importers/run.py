"""Import end to end, writing nothing: read the runs with the package's reader (importers/reader.py's
loop), map them, assemble the grid (importers/assemble.py). Writing is importers/write.py's."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

from safetyrepro.errors import UserError
from safetyrepro.hashing import sha256_file
from safetyrepro.tasks.envelope import RULES_PATH, parse_rules

from .assemble import assemble
from .mapping import load_mapping
from .reader import read_paths
from .write import Imported

# each format's reader, loaded on use (Inspect's log API is heavy)
READERS = {"lm-eval": ".lm_eval_runs", "inspect": ".inspect_logs", "eee": ".eee_records"}


def import_runs(
    package: str,
    paths: Sequence[str],
    *,
    metric: str | None = None,
    mapping_path: str | None = None,
    duplicates: str = "newest",
    skip_bad: bool = False,
) -> Imported:
    """Read and assemble, writing nothing (the Python entry point for notebooks, and the CLI's)."""
    if package not in READERS:
        raise UserError(f"unknown package {package!r}; allowed: {', '.join(READERS)}")
    reader = importlib.import_module(READERS[package], __package__).READER
    mapping = load_mapping(mapping_path)
    packaged_text = RULES_PATH.read_bytes()
    rules = parse_rules(packaged_text, str(RULES_PATH))
    reading = read_paths(reader, list(paths), mapping, rules, metric=metric, skip_bad=skip_bad)
    extra = []

    def row(path: str, kind: str, sha256: str | None, size: int, status: str) -> None:
        extra.append({"path": path, "kind": kind, "sha256": sha256, "bytes": size, "status": status, "cells": ""})

    if mapping.path:
        row(mapping.path, "mapping file", mapping.sha256, len(Path(mapping.path).read_bytes()), "used")
    for b in reading.bad:
        try:
            row(b.path, f"{package} input", sha256_file(b.path), Path(b.path).stat().st_size, f"bad: {b.reason}")
        except OSError:
            row(b.path, f"{package} input", "", 0, f"bad: {b.reason}")
    return assemble(reading, duplicates, mapping, packaged_text, extra)
