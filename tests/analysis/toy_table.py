"""A table added to `analyze` in one file (tests/analysis/test_registered_tables.py imports it): per benchmark, the
cells analysed and their mean parse rate."""

from __future__ import annotations

from safetyrepro.analysis.tables import register_table


@register_table(
    "cells_per_benchmark",
    title="Cells per benchmark",
    caption="one row per benchmark: the cells analysed and their mean parse rate",
    card="Cells per benchmark, with their mean parse rate",
)
def cells_per_benchmark(a):
    cells = a.grid.cells
    return cells.groupby("benchmark", as_index=False).agg(n_cells=("model", "size"), parse_rate=("parse_rate", "mean"))
