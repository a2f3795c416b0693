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
    # provenance rows of the files the reader did not use: the mapping file, the bad inputs
    used = [(mapping.path, "mapping file", "used")] if mapping.path else []
    extra = []
    for path, kind, status in used + [(b.path, f"{package} input", f"bad: {b.reason}") for b in reading.bad]:
        try:
            sha256, size = sha256_file(path), Path(path).stat().st_size
        except OSError:
            sha256, size = "", 0
        extra.append({"path": path, "kind": kind, "sha256": sha256, "bytes": size, "status": status, "cells": ""})
    return assemble(reading, duplicates, mapping, packaged_text, extra)
