"""Import end to end, writing nothing: read the runs with the package's reader, map them, assemble the
grid (importers/assemble.py). Writing is importers/write.py's."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path

from safetyrepro.errors import UserError
from safetyrepro.tasks.envelope import RULES_PATH, parse_rules
from safetyrepro.tasks.sources import sha256_file

from .assemble import assemble
from .common import Reading
from .mapping import load_mapping
from .write import Imported

PACKAGES = ("lm-eval", "inspect", "eee")
# the readers that live here; loaded on use (lm-eval's and Inspect's log APIs are heavy)
OWN_READERS = {"lm-eval": ".lm_eval_runs", "inspect": ".inspect_logs"}
Reader = Callable[..., Reading]


def _sha256_file(path: str) -> tuple[str, int]:
    try:
        return sha256_file(Path(path)), Path(path).stat().st_size
    except OSError:
        return "", 0


def import_runs(
    package: str,
    paths: Sequence[str],
    *,
    metric: str | None = None,
    mapping_path: str | None = None,
    duplicates: str = "newest",
    skip_bad: bool = False,
    read_paths: Reader | None = None,
) -> Imported:
    """Read and assemble, writing nothing (the Python entry point for notebooks, and the CLI's).
    `read_paths` reads the package's files into Runs: lm-eval's and Inspect's readers are here; a
    reader from outside the importers (Every Eval Ever's, safetyrepro/eee/import_.py) is passed in by
    its caller, so the importers never import the formats built on them."""
    if package not in PACKAGES:
        raise UserError(f"unknown package {package!r}; allowed: {', '.join(PACKAGES)}")
    if read_paths is None:
        if package not in OWN_READERS:
            raise UserError(f"import {package}: give its reader (read_paths=...)")
        read_paths = importlib.import_module(OWN_READERS[package], __package__).read_paths
    mapping = load_mapping(mapping_path)
    packaged_text = RULES_PATH.read_bytes()
    rules = parse_rules(packaged_text, str(RULES_PATH))
    reading = read_paths(list(paths), mapping, rules, metric=metric, skip_bad=skip_bad)
    extra = []
    if mapping.path:
        size = len(Path(mapping.path).read_bytes())
        extra.append(
            {
                "path": mapping.path,
                "kind": "mapping file",
                "sha256": mapping.sha256,
                "bytes": size,
                "status": "used",
                "cells": "",
            }
        )
    for b in reading.bad:
        sha, size = _sha256_file(b.path)
        extra.append(
            {
                "path": b.path,
                "kind": f"{package} input",
                "sha256": sha,
                "bytes": size,
                "status": f"bad: {b.reason}",
                "cells": "",
            }
        )
    return assemble(reading, duplicates, mapping, packaged_text, extra)
