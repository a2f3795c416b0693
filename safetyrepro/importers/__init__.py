"""Importers: the runs people already have (lm-eval output folders, Inspect logs, Every Eval Ever records) as a
SafetyRepro grid, from Python (`import_lm_eval`, ...; docs/api.md has an example) or with `safetyrepro import
lm-eval|inspect|eee PATH... --out DIR` (docs/importing.md). This module imports nothing heavy: `safetyrepro --help`
loads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .write import Imported


def import_lm_eval(
    paths: Sequence[str],
    *,
    metric: str | None = None,
    mapping: str | None = None,
    duplicates: str = "newest",
    skip_bad: bool = False,
) -> Imported:
    """lm-eval output folders (or results files) as an `Imported`: grid, items, provenance, unmapped,
    duplicates, disagreements and bad-input tables, the rules text and run.json's record."""
    from .run import import_runs

    return import_runs("lm-eval", paths, metric=metric, mapping_path=mapping, duplicates=duplicates, skip_bad=skip_bad)


def import_inspect(
    paths: Sequence[str],
    *,
    metric: str | None = None,
    mapping: str | None = None,
    duplicates: str = "newest",
    skip_bad: bool = False,
) -> Imported:
    """Inspect log folders (or .eval/.json logs) as an `Imported` (see `import_lm_eval`)."""
    from .run import import_runs

    return import_runs("inspect", paths, metric=metric, mapping_path=mapping, duplicates=duplicates, skip_bad=skip_bad)


def import_eee(
    paths: Sequence[str],
    *,
    metric: str | None = None,
    mapping: str | None = None,
    duplicates: str = "newest",
    skip_bad: bool = False,
) -> Imported:
    """Every Eval Ever records (folders searched for <uuid>.json, or record files) as an `Imported`."""
    from .run import import_runs

    return import_runs("eee", paths, metric=metric, mapping_path=mapping, duplicates=duplicates, skip_bad=skip_bad)
