"""Importers: the runs people already have (lm-eval output folders, Inspect logs) as a SafetyRepro grid.

    from safetyrepro.importers import import_lm_eval
    from safetyrepro.analysis import api

    imported = import_lm_eval(["runs/lm-eval"], mapping="mapping.yaml")   # reads, writes nothing
    imported.grid, imported.items, imported.unmapped, imported.disagreements
    imported.write("runs/imported")                                       # what `safetyrepro import` writes
    api.analyze(imported.grid, imported.items, rules="runs/imported/rules.yaml")

The command line is `safetyrepro import lm-eval|inspect PATH... --out DIR` (docs/importing.md). This
module imports nothing heavy: `safetyrepro --help` loads it.
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
