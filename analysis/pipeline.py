"""`analyze` end to end: every table computed from one validated grid, then written to DIR.
Computation (`run_analysis`) is separate from I/O (`write_tables`), so tests can check the numbers
without touching the disk."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import pandas as pd

from safetyrepro.analysis import tables
from safetyrepro.analysis.metrics import (
    bootstrap,
    degenerate,
    dispersion,
    orderings,
    rank_flip,
    readings,
    variance,
    verdict_certificate,
)
from safetyrepro.analysis.metrics.attribution import Attribution, axis_attribution
from safetyrepro.analysis.paired import detectable, significance
from safetyrepro.atomic import atomic_write
from safetyrepro.errors import UserError
from safetyrepro.grid.grid_io import Grid, excluded_cells
from safetyrepro.grid_schema import TIE_RATE
from safetyrepro.tasks.envelope import Rules

DEFAULT_THETAS = (0.5, 0.6, 0.7, 0.8)
DEFAULT_RESAMPLES = 1000
ALPHA = 0.05


@dataclass(frozen=True)
class AnalysisOptions:
    slices: tuple[str, ...]
    thetas: tuple[float, ...] = DEFAULT_THETAS
    n_resamples: int = DEFAULT_RESAMPLES
    seed: int = 0
    alpha: float = ALPHA
    items_path: str | None = None
    items_required: bool = True  # False when the file was found beside the grid rather than named


@dataclass(frozen=True, eq=False)
class Analysis:
    grid: Grid
    rules: Rules
    options: AnalysisOptions
    rho_flip_detail: pd.DataFrame
    rho_flip_max: pd.DataFrame
    orderings_detail: pd.DataFrame
    config_orderings: pd.DataFrame
    concordance: pd.DataFrame
    sdi: pd.DataFrame
    cfr: pd.DataFrame
    tier_ablation: pd.DataFrame
    anova: pd.DataFrame
    variance_shares: pd.DataFrame
    attribution: Attribution
    bootstrap: pd.DataFrame
    certificate: pd.DataFrame
    item_tests: pd.DataFrame | None
    significant_flips: pd.DataFrame | None
    degenerate_cells: pd.DataFrame
    degenerate_effects: pd.DataFrame
    excluded_cells: pd.DataFrame  # cells whose status is not ok, counted per status/model/benchmark/scoring
    tie_rates: pd.DataFrame | None  # per logprob cell with tie_rate > 0 (None when the grid has no tie_rate)
    detectable: pd.DataFrame | None  # per benchmark x slice x pair: what its items can detect (None without items)
    warnings: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())  # why a part was skipped
    # per free-form configuration and pair: form (parse rates) and content (items both read) readings, readings.py
    content_readings: pd.DataFrame | None = None
    registered: dict[str, pd.DataFrame | None] = field(default_factory=dict)  # tables.py's tables, by name

    @cached_property
    def cell_bases(self) -> dict[tuple[str, str], readings.CellBasis]:
        return readings.cell_bases(self.degenerate_cells)

    @cached_property
    def content_by_key(self) -> dict[tuple[str, str, str], object]:
        return readings.content_index(self.content_readings)

    def rests_on(self, config_id: str, lead: str, trail: str) -> readings.RestsOn:
        """What a lead of `lead` over `trail` on `config_id` rests on (readable, format-driven, uninformative)."""
        return readings.rests_on(config_id, lead, trail, self.cell_bases, self.content_by_key)


def tie_rate_table(grid: Grid) -> pd.DataFrame | None:
    """Cells whose logprob items had exactly tied top candidates, most ties first."""
    if not grid.has_tie_rate:
        return None
    cells = grid.cells[grid.cells[TIE_RATE].fillna(0) > 0]
    return (
        cells[["model", "benchmark", "config_id", "score", TIE_RATE]]
        .sort_values([TIE_RATE, "benchmark", "config_id", "model"], ascending=[False, True, True, True])
        .reset_index(drop=True)
    )


def run_analysis(
    grid: Grid, rules: Rules, options: AnalysisOptions, items_frame: pd.DataFrame | None = None
) -> Analysis:
    """Every table from one validated grid; item records from `options.items_path`, or from
    `items_frame` (the Python API's DataFrame) when given."""
    slices = options.slices
    detail = rank_flip.rho_flip_table(grid, rules, slices)
    maxima = rank_flip.rho_flip_max(detail, len(grid.models))
    orderings_detail, concordance = orderings.orderings_tables(grid, rules, slices)
    sdi, cfr = dispersion.dispersion_tables(grid, rules, slices, options.thetas)
    tier = maxima[["benchmark", "slice", "n_configs", "rho_flip_max", "ceiling", "chance_max"]].merge(
        orderings_detail[["benchmark", "slice", "n_orderings", "n_possible"]], on=["benchmark", "slice"]
    )

    notes: list[str] = []
    fitted = []
    for b in grid.benchmarks:
        results, reasons = variance.variance_attributions(grid, rules, b, options.n_resamples, options.seed)
        fitted.extend(results)
        notes.extend(f"ANOVA skipped for {r}" for r in reasons)
    anova, shares = variance.variance_tables(fitted)
    attribution = axis_attribution(grid, rules, options.seed)
    notes.extend(attribution.notes)
    full = {b: grid.matrix(b) for b in grid.benchmarks}
    boot = bootstrap.bootstrap_table(full, options.n_resamples, options.seed)
    certificate = verdict_certificate.verdict_certificate(grid, rules, slices)

    warnings = list(grid.warnings)
    item_tests = flips = items = None
    if items_frame is not None:
        items = significance.items_from_frame(items_frame, grid, "the items DataFrame")
        warnings.extend(items.warnings)
        tested = significance.item_analysis(
            items, grid, rules, slices, options.alpha, options.n_resamples, options.seed
        )
        item_tests, flips = tested.tests, tested.flips
    elif options.items_path:
        try:
            items = significance.load_items(options.items_path, grid)
        except UserError as e:
            if options.items_required:
                raise
            items = None
            warnings.append(f"items: {options.items_path} found beside the grid but not used: {e}")
        if items is not None:
            warnings.extend(items.warnings)
            tested = significance.item_analysis(
                items, grid, rules, slices, options.alpha, options.n_resamples, options.seed
            )
            item_tests, flips = tested.tests, tested.flips
    else:
        notes.append(
            "significant flips skipped: no per-item records (pass --items, or keep items.parquet beside the grid)"
        )
    found = None if items is None else detectable.detectable_table(items, grid, rules, slices, options.alpha)
    cells = degenerate.degenerate_cells(
        grid, items.empty_outputs if items is not None else None, items.option_bias if items is not None else None
    )
    effects = degenerate.degenerate_effects(grid, rules, cells, options.thetas)

    a = Analysis(
        grid,
        rules,
        options,
        detail,
        maxima,
        orderings_detail,
        orderings.config_orderings_table(grid),
        concordance,
        sdi,
        cfr,
        tier,
        anova,
        shares,
        attribution,
        boot,
        certificate,
        item_tests,
        flips,
        cells,
        effects,
        excluded_cells(grid.excluded),
        tie_rate_table(grid),
        found,
        tuple(warnings),
        tuple(notes),
        None if items is None else items.content,
    )
    return replace(a, registered=tables.computed(a)) if tables.TABLES else a


# file name -> what it holds; the two contract tables keep exactly the contract columns of docs/formats.md
def table_files(a: Analysis) -> dict[str, pd.DataFrame | None]:
    return {
        "rho_flip.csv": a.rho_flip_detail[list(rank_flip.RHO_FLIP_COLUMNS)],
        "rho_flip_detail.csv": a.rho_flip_detail,
        "rho_flip_max.csv": a.rho_flip_max,
        "orderings.csv": a.orderings_detail[list(orderings.ORDERINGS_COLUMNS)],
        "orderings_detail.csv": a.orderings_detail,
        "config_orderings.csv": a.config_orderings,
        "concordance.csv": a.concordance,
        "tier_ablation.csv": a.tier_ablation,
        "sdi.csv": a.sdi,
        "cfr.csv": a.cfr,
        "anova.csv": a.anova,
        "variance_shares.csv": a.variance_shares,
        "shap_regressor.csv": a.attribution.regressor,
        "shap_pair_classifier.csv": a.attribution.classifier,
        "bootstrap.csv": a.bootstrap,
        "verdict_certificate.csv": a.certificate,
        "item_tests.csv": a.item_tests,
        "significant_flips.csv": a.significant_flips,
        "degenerate_cells.csv": a.degenerate_cells,
        "degenerate_effects.csv": a.degenerate_effects,
        "excluded_cells.csv": a.excluded_cells,
        "tie_rates.csv": a.tie_rates,
        "detectable.csv": a.detectable,
        "content_readings.csv": a.content_readings,
        **{tables.TABLES[name].file: table for name, table in a.registered.items() if name in tables.TABLES},
    }


def write_tables(a: Analysis, out: Path) -> list[Path]:
    """The tables into `out`, a fresh staging folder (analysis/render/output.py `write_all`): a table this run
    does not have is simply not there once the folder is swapped in."""
    written = []
    for name, table in table_files(a).items():
        if table is None:
            continue
        path = out / name
        atomic_write(path, table.to_csv(index=False), root=out)
        written.append(path)
    return written


def parse_thetas(values: Sequence[float] | None) -> tuple[float, ...]:
    thetas = tuple(values) if values else DEFAULT_THETAS
    for t in thetas:
        if not 0 <= t <= 1:
            raise UserError(f"--theta {t} is outside [0, 1]; scores are shares")
    return thetas
