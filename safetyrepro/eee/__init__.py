"""Every Eval Ever (EEE) records in and out (docs/eee.md).

    safetyrepro export eee GRID [--items ITEMS] --out DIR     # one EEE record per cell, items as EEE instances
    safetyrepro import eee PATH... --out DIR                 # EEE records (any converter's) as a grid

    from safetyrepro.eee import export_eee, import_eee
    export, written = export_eee("runs/x/grid.csv", "runs/x/eee")
    imported = import_eee(["runs/x/eee"])                   # an `Imported`, as import_lm_eval gives
    imported.write("runs/x/from-eee")

The schema is EEE's 0.3.0 (the `every-eval-ever` package, Python >= 3.12, kept out of the main venv:
`make eee` builds .venv-eee); neither direction needs it installed. `safetyrepro.eee.venv` runs its
validator and converters in that venv. This module imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from safetyrepro.importers.write import Imported


def export_eee(grid, out, **kwargs):
    """GRID (with items.parquet, rules.yaml and run.json beside it when present) as EEE records in
    `out`; returns (Export, written paths). See safetyrepro.eee.export.export_eee for the options."""
    from .export import export_eee as run

    return run(grid, out, **kwargs)


def import_eee(
    paths: Sequence[str],
    *,
    metric: str | None = None,
    mapping: str | None = None,
    duplicates: str = "newest",
    skip_bad: bool = False,
) -> Imported:
    """EEE records (folders searched for <uuid>.json, or record files) as an `Imported`."""
    from safetyrepro.importers.run import import_runs

    from .import_ import (
        read_paths,  # lazy: the package's facade stays light: `safetyrepro --help` loads it
    )

    return import_runs(
        "eee",
        paths,
        metric=metric,
        mapping_path=mapping,
        duplicates=duplicates,
        skip_bad=skip_bad,
        read_paths=read_paths,
    )
