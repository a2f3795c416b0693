"""Every Eval Ever (EEE) records in and out: `safetyrepro export eee GRID --out DIR` writes one EEE record
per cell, `safetyrepro import eee PATH... --out DIR` reads any converter's records as a grid; from Python,
`export_eee` and `import_eee` (docs/eee.md). Neither needs EEE's package (Python >= 3.12, kept in
.venv-eee: `make eee`), whose validator and converters `safetyrepro.eee.venv` runs. This module imports
nothing heavy.
"""

from __future__ import annotations

from safetyrepro.importers import import_eee

__all__ = ["export_eee", "import_eee"]


def export_eee(grid, out, **kwargs):
    """GRID (with items.parquet, rules.yaml and run.json beside it when present) as EEE records in
    `out`; returns (Export, written paths). See safetyrepro.eee.export.export_eee for the options."""
    from .export import export_eee as run

    return run(grid, out, **kwargs)
