"""The verdict certificate (beyond the paper): for each benchmark, slice and pair, the configuration
that favours A most and the one that favours B most, with both scores and the config_id, so a
reader can re-run exactly those two cells and see the verdict move (or not)."""

from __future__ import annotations

import pandas as pd

from safetyrepro.tasks.envelope import Rules

from .grid_io import Grid
from .rank_flip import model_pairs
from .slices import slice_matrices

CERTIFICATE_COLUMNS = ("benchmark", "slice", "model_a", "model_b", "extreme", "config_id", "score_a",
                       "score_b", "diff", "precision", "package")


def verdict_certificate(grid: Grid, rules: Rules, slices: tuple[str, ...]) -> pd.DataFrame:
    """Two rows per benchmark x slice x pair: extreme "max" (largest A - B) and "min" (smallest).
    Among equal differences the first configuration in envelope order is named."""
    rows = []
    for benchmark, name, m in slice_matrices(grid, rules, slices):
        for a, b in model_pairs(grid.models):
            diff = m[a] - m[b]
            for extreme, cid in (("max", diff.idxmax()), ("min", diff.idxmin())):
                rows.append((benchmark, name, a, b, extreme, cid, float(m.at[cid, a]), float(m.at[cid, b]),
                             float(diff[cid]), grid.precision, grid.package))
    return pd.DataFrame(rows, columns=list(CERTIFICATE_COLUMNS))
