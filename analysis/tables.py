"""Tables that register themselves: a table added to `analyze` is one file (issue 55), in the way of lm-eval's
`register_metric` and HELM's `run_spec_function`.

A module defines a function from the finished analysis to a DataFrame and registers it once, with the file it is
written to, the heading and caption of its report block and what the GRID card says of it:

    from safetyrepro.analysis.tables import register_table

    @register_table("pair_counts", title="Configurations per pair", caption="... what a row is ...")
    def pair_counts(a):  # a: the Analysis every built-in table is in
        return a.rho_flip_detail.groupby("benchmark", as_index=False)["n_configs"].sum()

Once the module is imported, `analyze` (the command and the Python API) writes `pair_counts.csv`, report.md and
report.html show the block after the built-in tables, and the card (grid_card.md and .json) lists the table with
its rows. A function returning None (nothing to show for this grid) writes no file and no block; the card says so.
The built-in tables keep their own places in pipeline.py, report.py and card.py, whose order the published
outputs fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


@dataclass(frozen=True)
class TableSpec:
    name: str  # the file is <name>.csv
    compute: Callable[[Any], pd.DataFrame | None]  # the finished Analysis -> the table, or None
    title: str  # the report block's heading
    caption: str  # what a row is, under the table in the report
    card: str  # the card's line about it

    @property
    def file(self) -> str:
        return f"{self.name}.csv"


TABLES: dict[str, TableSpec] = {}


def register_table(name: str, *, title: str, caption: str, card: str = "") -> Callable:
    """Register the decorated function as the table `name` (a lower-case file stem); registering a name twice is
    an error, so that two modules cannot write one file."""
    if not name or any(c not in NAME_CHARS for c in name):
        raise ValueError(f"table name {name!r}: lower-case letters, digits and _ (it is the file's stem)")

    def add(compute: Callable[[Any], pd.DataFrame | None]):
        if name in TABLES:
            raise ValueError(f"table {name!r} is registered already (by {TABLES[name].compute.__module__})")
        TABLES[name] = TableSpec(name, compute, title, caption, card or title)
        return compute

    return add


def unregister_table(name: str) -> None:
    TABLES.pop(name, None)


def computed(a: Any) -> dict[str, pd.DataFrame | None]:
    """Every registered table of the analysis `a`, by name (None where its function had nothing to show)."""
    out = {}
    for spec in TABLES.values():
        table = spec.compute(a)
        if table is not None and not isinstance(table, pd.DataFrame):
            raise TypeError(f"table {spec.name!r}: {spec.compute.__name__} returned {type(table).__name__}")
        out[spec.name] = table
    return out
