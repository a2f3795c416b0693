"""The analysis as a Python API on pandas DataFrames, for notebooks: the same code `safetyrepro
analyze` runs, without files in between.

    import pandas as pd
    from safetyrepro.analysis import api

    grid = pd.read_csv("runs/x/grid.csv")                  # the documented grid format (docs/formats.md)
    api.rho_flip(grid)                                      # per benchmark x slice x model pair
    api.orderings(grid)                                     # orderings reached, ties as weak orders
    api.significant_flips(grid, pd.read_parquet("runs/x/items.parquet"))
    a = api.analyze(grid, items=pd.read_parquet("runs/x/items.parquet"))
    a.rho_flip_max, a.significant_flips, a.variance_shares  # every table of the CLI's DIR, as DataFrames
    a.report("runs/x/analysis")                             # report.md/html, tables, figures, GRID card

A grid DataFrame is checked exactly as a grid file is (one-line UserError on bad input).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from safetyrepro.analysis.metrics.orderings import orderings_tables
from safetyrepro.analysis.metrics.rank_flip import rho_flip_table
from safetyrepro.analysis.metrics.slices import check_slices
from safetyrepro.analysis.paired.significance import item_analysis, items_from_frame
from safetyrepro.analysis.render.output import write_all
from safetyrepro.errors import UserError
from safetyrepro.grid.grid_io import Grid, common_configurations, select_group, validate_cells
from safetyrepro.tasks.envelope import Rules, load_rules

from .pipeline import (
    DEFAULT_RESAMPLES,
    Analysis,
    AnalysisOptions,
    parse_thetas,
    run_analysis,
    table_files,
)

SOURCE = "the grid DataFrame"


def prepare(
    grid: pd.DataFrame, rules: str | None = None, precision: str | None = None, package: str | None = None
) -> tuple[Grid, Rules]:
    """(validated Grid, Rules) from a grid DataFrame: the checks `safetyrepro analyze` makes on a file."""
    loaded = load_rules(rules)
    frame = select_group(validate_cells(grid.copy(), loaded, SOURCE), SOURCE, precision, package)
    return common_configurations(frame, SOURCE, loaded), loaded


def _slices(slices: Sequence[str] | None, rules: Rules) -> tuple[str, ...]:
    return check_slices(list(slices) if slices else None, rules)


def rho_flip(grid: pd.DataFrame, slices: Sequence[str] = ("full",), rules: str | None = None) -> pd.DataFrame:
    """rho_flip per benchmark x slice x model pair (rho_flip_detail.csv's columns): counts each way,
    ties, ceiling, chance, and the same in the benchmark's better direction."""
    g, r = prepare(grid, rules)
    return rho_flip_table(g, r, _slices(slices, r))


def orderings(grid: pd.DataFrame, slices: Sequence[str] = ("full",), rules: str | None = None) -> pd.DataFrame:
    """Orderings reached per benchmark x slice (orderings_detail.csv's columns)."""
    g, r = prepare(grid, rules)
    return orderings_tables(g, r, _slices(slices, r))[0]


def significant_flips(
    grid: pd.DataFrame,
    items: pd.DataFrame,
    slices: Sequence[str] = ("full",),
    alpha: float = 0.05,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    rules: str | None = None,
) -> pd.DataFrame:
    """significant_flips.csv from a grid and its per-item records (items.parquet's format): Holm
    (confirmatory) and BH (exploratory) rows per benchmark x slice x pair."""
    g, r = prepare(grid, rules)
    return item_analysis(
        items_from_frame(items, g, "the items DataFrame"), g, r, _slices(slices, r), alpha, n_resamples, seed
    ).flips


@dataclass(frozen=True, eq=False)
class AnalysisResult:
    """Every table of `safetyrepro analyze` as a DataFrame attribute (rho_flip_detail, rho_flip_max,
    orderings_detail, concordance, sdi, cfr, variance_shares, significant_flips, ...), and `report`."""

    analysis: Analysis
    grid_frame: pd.DataFrame

    def __getattr__(self, name: str):
        return getattr(self.analysis, name)

    def tables(self) -> dict[str, pd.DataFrame | None]:
        """The tables by the file names the CLI writes them under."""
        return table_files(self.analysis)

    def report(self, out: str | Path, figures: bool = True) -> list[Path]:
        """Write what `safetyrepro analyze` writes into `out` (the analysed grid as out/grid.csv
        first, so that the GRID card names the exact data); returns the paths written."""
        out = Path(out)
        return write_all(
            self.analysis, out / "grid.csv", out, figures=figures, grid_text=self.grid_frame.to_csv(index=False)
        )


def analyze(
    grid: pd.DataFrame,
    items: pd.DataFrame | None = None,
    *,
    slices: Sequence[str] | None = None,
    thetas: Sequence[float] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    alpha: float = 0.05,
    rules: str | None = None,
    precision: str | None = None,
    package: str | None = None,
) -> AnalysisResult:
    """Every analysis of `safetyrepro analyze` on a grid DataFrame (and, when given, its per-item
    records), without writing anything; `.report(dir)` writes the files."""
    if n_resamples < 1:
        raise UserError(f"n_resamples {n_resamples}: needs at least one resample")
    g, r = prepare(grid, rules, precision, package)
    options = AnalysisOptions(
        slices=_slices(slices, r), thetas=parse_thetas(thetas), n_resamples=n_resamples, seed=seed, alpha=alpha
    )
    return AnalysisResult(run_analysis(g, r, options, items_frame=items), grid)
